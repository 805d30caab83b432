/* test_merge.c - gtrain merge (src/io/merge.c) against Hugging Face PEFT itself
 * (tests/tools/peft_merge_ref.py: the base loaded with transformers, PeftModel.from_pretrained,
 * merge_and_unload; adapters written by PEFT's get_peft_model + save_pretrained): a Llama with all
 * seven modules adapted and rslora, GPT-2's Conv1D weights (fan_in_fan_out: the transposed delta)
 * with and without the "transformer." prefix, a Qwen2 bf16 base merged to bf16 and to fp32. PEFT
 * merges in the model's dtype (float32: its own float32 B @ A; bf16: a float32 delta added to the
 * bf16 weight), gtrain in double rounded once: the adapted weights agree within those roundings
 * (the bounds are in the tool). Hand-written checks, of what PEFT does not do: the float64 merge
 * rounded once (gtrain's documented rounding: exact in bf16, 1e-6 relative in fp32), sharded output
 * read back (save_pretrained's split and index), the base's other tensors copied exactly; hostile
 * adapters (PEFT's files edited) and bases through the binary (exit 2, one line naming the file,
 * nothing written), a write that fails half-way (nothing left), and the double -> bf16 rounding
 * itself. Fails where the test references are not installed. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "merge.h"
#include "test_backend_select.h"
#include "test_util.h"


static const char *need_torch(void) {
    const char *root = getenv("GTRAIN_ROOT");
    if (!root) cr_skip_test("GTRAIN_ROOT is not set");
    test_require_refs();
    return root;
}

static const char *need_bin(void) {
    const char *bin = test_gtrain_bin();
    if (!bin) cr_skip_test("GTRAIN_BIN is not set (run through make test)");
    return bin;
}

/* run a shell command; the test fails (with its output) unless it exits 0 */
static void sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sh(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *out = test_sh_voutput(true, fmt, ap);
    va_end(ap);
    if (strstr(out, "ok ")) cr_log_info("%s", out); /* peft_merge_ref.py check's summaries */
    free(out);
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    cr_assert(f, "cannot read %s", path);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static void replace_in_file(const char *path, const char *old, const char *new) {
    char *t = read_text(path);
    char *at = strstr(t, old);
    cr_assert(at, "%s: no \"%s\"", path, old);
    char out[1 << 16];
    snprintf(out, sizeof out, "%.*s%s%s", (int)(at - t), t, new, at + strlen(old));
    test_write_file(path, out, strlen(out));
}

/* gtrain ARGS with stdout and stderr into dir/stdout, dir/stderr; the exit status (128 + signal) */
static int gtrain(const char *dir, const char *args) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' %s >'%s/stdout' 2>'%s/stderr'", need_bin(), args, dir, dir);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

static bool exists(const char *p) {
    struct stat sb;
    return lstat(p, &sb) == 0;
}

/* no ".NAME.merge-*" left in dir */
static void assert_no_tmp(const char *dir, const char *name) {
    char pre[128];
    snprintf(pre, sizeof pre, ".%s.merge-", name);
    DIR *d = opendir(dir);
    cr_assert(d);
    for (struct dirent *de; (de = readdir(d));)
        cr_assert(strncmp(de->d_name, pre, strlen(pre)) != 0, "%s/%s was left behind", dir, de->d_name);
    closedir(d);
}

static void check(const char *root, const char *dir, const char *base, const char *ad, const char *merged,
                  const char *extra) {
    sh(PY " '%s/tests/tools/peft_merge_ref.py' check '%s/%s' '%s/%s' '%s/%s' %s", root, dir, base, dir, ad, dir, merged,
       extra);
}

Test(merge, llama_all_seven_modules_rslora_match_a_float64_merge, .timeout = 180) {
    const char *root = need_torch();
    char dir[256];
    test_scratch_make(dir, sizeof dir, "gt_merge_llama");
    /* a sharded base (an index and shards of ~40 KB) */
    sh(PY " '%s/tests/tools/hf_models.py' make '%s/tests/fixtures/hf_configs/tiny-llama.json' '%s/base' --seed 5 "
       "--dtype f32 --max-shard-bytes 40000 --init-std 0.1", root, root, dir);
    cr_assert(exists(test_join(dir, "base/model.safetensors.index.json")));
    sh(PY " '%s/tests/tools/peft_merge_ref.py' adapter '%s/base' '%s/ad' --targets "
       "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj --r 4 --alpha 8 --rslora --seed 3", root, dir, dir);
    /* in-process, a staging buffer of 1024 floats: every tensor in several chunks of whole rows */
    char base[300], ad[300], out[300];
    snprintf(base, sizeof base, "%s/base", dir);
    snprintf(ad, sizeof ad, "%s/ad", dir);
    snprintf(out, sizeof out, "%s/merged", dir);
    MergeOptions o = {.base = base, .adapter = ad, .out = out, .staging_bytes = 4096};
    MergeSummary s;
    GtError err = {0};
    cr_assert_eq(merge_run(&o, &s, &err), 0, "%s", err.msg);
    cr_assert_eq(s.n_adapted, 2 * 7, "%d adapted", s.n_adapted);
    cr_assert_eq(s.n_tensors, 21);
    cr_assert_eq(s.n_shards, 1);
    cr_assert(!s.bf16);
    cr_assert_float_eq(s.scale, 8 / sqrt(4.0), 1e-15); /* rslora: alpha / sqrt(r) */
    check(root, dir, "base", "ad", "merged", "--dtype f32");
    assert_no_tmp(dir, "merged");
    test_scratch_remove(dir);
}

Test(merge, gpt2_conv1d_weights_get_the_transposed_delta, .timeout = 180) {
    const char *root = need_torch();
    char dir[256];
    test_scratch_make(dir, sizeof dir, "gt_merge_gpt2");
    /* c_proj names both attn.c_proj and mlp.c_proj (PEFT's suffix match); a bf16 adapter file. And an
     * old checkpoint: names without "transformer.", the attention-mask buffers [1, 1, P, P], all bf16
     * (so the output is bf16 too, rounded once from the double merge) */
    sh(PY " '%s/tests/tools/peft_merge_ref.py' gpt2 '%s/base' --seed 1 --layers 2 --embd 32 --heads 4 + "
       "adapter '%s/base' '%s/ad' --targets c_attn,c_proj,c_fc --r 3 --alpha 6 --dtype bf16 --seed 2 + "
       "gpt2 '%s/old' --seed 4 --old-names --dtype bf16", root, dir, dir, dir, dir);
    /* --out an empty directory that exists: replaced whole */
    cr_assert_eq(mkdir(test_join(dir, "merged"), 0755), 0);
    char args[2048];
    snprintf(args, sizeof args, "merge --base '%s/base' --adapter '%s/ad' --out '%s/merged'", dir, dir, dir);
    int st = gtrain(dir, args);
    cr_assert_eq(st, 0, "exit %d: %s", st, read_text(test_join(dir, "stderr")));
    cr_assert(strstr(read_text(test_join(dir, "stdout")), "(8 merged with the adapter: r 3, scale 2), fp32"), "%s",
              read_text(test_join(dir, "stdout")));
    snprintf(args, sizeof args, "merge --base '%s/old' --adapter '%s/ad' --out '%s/merged-old'", dir, dir, dir);
    st = gtrain(dir, args);
    cr_assert_eq(st, 0, "exit %d: %s", st, read_text(test_join(dir, "stderr")));
    sh(PY " '%s/tests/tools/peft_merge_ref.py' check '%s/base' '%s/ad' '%s/merged' --dtype f32 + "
       "check '%s/old' '%s/ad' '%s/merged-old' --dtype bf16", root, dir, dir, dir, dir, dir, dir);
    assert_no_tmp(dir, "merged");
    assert_no_tmp(dir, "merged-old");
    test_scratch_remove(dir);
}

/* DoRA (use_dora): W' = (m / ||W + s B A||_row) (W + s B A), against the float64 merge and PEFT's
 * merge_and_unload of the same DoRA adapter (magnitudes that are neither ||W|| nor the merged norm);
 * Llama's fused q|k|v and gate|up blocks (the norm of each module's own rows) and GPT-2's Conv1D
 * (the rows are the stored columns) */
Test(merge, dora_adapters_match_peft_merge_and_unload, .timeout = 180) {
    const char *root = need_torch();
    char dir[256];
    test_scratch_make(dir, sizeof dir, "gt_merge_dora");
    sh(PY " '%s/tests/tools/hf_models.py' make '%s/tests/fixtures/hf_configs/tiny-llama.json' '%s/base' --seed 5 "
       "--dtype f32 --init-std 0.1", root, root, dir);
    sh(PY " '%s/tests/tools/peft_merge_ref.py' adapter '%s/base' '%s/ad' --targets q_proj,v_proj,up_proj,down_proj "
       "--r 4 --alpha 8 --dora --seed 3 + gpt2 '%s/g' --seed 1 --layers 2 --embd 32 --heads 4 + "
       "adapter '%s/g' '%s/gad' --targets c_attn,c_proj,c_fc --r 3 --alpha 6 --dora --seed 2", root, dir, dir, dir, dir,
       dir);
    char args[2048];
    snprintf(args, sizeof args, "merge --base '%s/base' --adapter '%s/ad' --out '%s/merged'", dir, dir, dir);
    int st = gtrain(dir, args);
    cr_assert_eq(st, 0, "exit %d: %s", st, read_text(test_join(dir, "stderr")));
    snprintf(args, sizeof args, "merge --base '%s/g' --adapter '%s/gad' --out '%s/gmerged'", dir, dir, dir);
    st = gtrain(dir, args);
    cr_assert_eq(st, 0, "exit %d: %s", st, read_text(test_join(dir, "stderr")));
    sh(PY " '%s/tests/tools/peft_merge_ref.py' check '%s/base' '%s/ad' '%s/merged' --dtype f32 + "
       "check '%s/g' '%s/gad' '%s/gmerged' --dtype f32", root, dir, dir, dir, dir, dir, dir);
    test_scratch_remove(dir);
}

Test(merge, sharded_output_is_save_pretrained_split_read_back, .timeout = 180) {
    const char *root = need_torch();
    char dir[256];
    test_scratch_make(dir, sizeof dir, "gt_merge_shards");
    /* Qwen2: q/k/v biases (never adapted), tied embeddings; bf16 */
    sh(PY " '%s/tests/tools/hf_models.py' make '%s/tests/fixtures/hf_configs/tiny-qwen2.json' '%s/base' --seed 7 "
       "--dtype bf16 --init-std 0.1", root, root, dir);
    sh(PY " '%s/tests/tools/peft_merge_ref.py' adapter '%s/base' '%s/ad' --targets q_proj,self_attn.v_proj,down_proj "
       "--r 8 --alpha 16 --seed 5", root, dir, dir);
    char args[2048];
    /* the default dtype: the base's bf16; shards of 20 KB */
    snprintf(args, sizeof args, "merge --base '%s/base' --adapter '%s/ad' --out '%s/m-bf16' --max-shard-size 20KB", dir,
             dir, dir);
    int st = gtrain(dir, args);
    cr_assert_eq(st, 0, "exit %d: %s", st, read_text(test_join(dir, "stderr")));
    /* fp32 asked for: the bf16 base widened exactly, the merge rounded once to fp32 */
    snprintf(args, sizeof args, "merge --base '%s/base' --adapter '%s/ad' --out '%s/m-f32' --max-shard-size 50000 --dtype "
             "fp32", dir, dir, dir);
    st = gtrain(dir, args);
    cr_assert_eq(st, 0, "exit %d: %s", st, read_text(test_join(dir, "stderr")));
    sh(PY " '%s/tests/tools/peft_merge_ref.py' check '%s/base' '%s/ad' '%s/m-bf16' --dtype bf16 --max-shard-bytes 20000 "
       "--min-shards 3 + check '%s/base' '%s/ad' '%s/m-f32' --dtype f32 --max-shard-bytes 50000 --min-shards 3", root,
       dir, dir, dir, dir, dir, dir);
    test_scratch_remove(dir);
}

/* gtrain ARGS must exit 2 with one line on stderr naming file and key, and leave dir/out absent */
static void expect_refused(const char *dir, const char *args, const char *file, const char *key) {
    int st = gtrain(dir, args);
    const char *e = read_text(test_join(dir, "stderr"));
    cr_assert_eq(st, 2, "%s: exit %d, expected 2: %s", args, st, e);
    cr_assert(strncmp(e, "gtrain: ", 8) == 0 && strchr(e, '\n') == e + strlen(e) - 1, "%s: not one line: %s", args, e);
    cr_assert(strstr(e, file), "%s: the message does not name %s: %s", args, file, e);
    cr_assert(strstr(e, key), "%s: the message does not name %s: %s", args, key, e);
    cr_assert(!exists(test_join(dir, "out")), "%s: %s/out was created", args, dir);
    assert_no_tmp(dir, "out");
}

Test(merge, hostile_adapters_and_bases_exit_2_with_one_line_and_write_nothing, .timeout = 300) {
    const char *root = need_torch();
    need_bin();
    char dir[256], args[4096], file[512];
    test_scratch_make(dir, sizeof dir, "gt_merge_hostile");
    const char *ref = "tests/tools/peft_merge_ref.py";
    sh(PY " '%s/tests/tools/hf_models.py' make '%s/tests/fixtures/hf_configs/tiny-llama.json' '%s/base' --seed 2", root,
       root, dir);
    sh("cd '%s' && " PY " %s adapter '%s/base' '%s/good' --targets q_proj,down_proj --r 4 + "
       "adapter '%s/base' '%s/r-mismatch' --targets q_proj,down_proj --r 4 --config-r 8 + "
       "adapter '%s/base' '%s/bad-shape' --targets q_proj,down_proj --r 4 --bad-shape + "
       "adapter '%s/base' '%s/extra-layer' --targets q_proj,down_proj --r 4 --extra-layer",
       root, ref, dir, dir, dir, dir, dir, dir, dir, dir);
    /* the good adapter merges (so each refusal below is the one change) */
    snprintf(args, sizeof args, "merge --base '%s/base' --adapter '%s/good' --out '%s/ok'", dir, dir, dir);
    cr_assert_eq(gtrain(dir, args), 0, "%s", read_text(test_join(dir, "stderr")));

#define MERGE(adapter_dir, base_dir) \
    snprintf(args, sizeof args, "merge --base '%s/%s' --adapter '%s/%s' --out '%s/out'", dir, base_dir, dir, adapter_dir, dir)
#define FILE_OF(sub, name) snprintf(file, sizeof file, "%s/%s/%s", dir, sub, name)

    /* another peft_type */
    sh("cp -r '%s/good' '%s/prefix'", dir, dir);
    replace_in_file(test_join(dir, "prefix/adapter_config.json"), "\"peft_type\": \"LORA\"", "\"peft_type\": \"PREFIX_TUNING\"");
    MERGE("prefix", "base");
    FILE_OF("prefix", "adapter_config.json");
    expect_refused(dir, args, file, "peft_type");
    /* r of the config against the tensors' */
    MERGE("r-mismatch", "base");
    FILE_OF("r-mismatch", "adapter_model.safetensors");
    expect_refused(dir, args, file, "r = 8");
    /* lora_A one column wider than the base's in */
    MERGE("bad-shape", "base");
    FILE_OF("bad-shape", "adapter_model.safetensors");
    expect_refused(dir, args, file, "lora_A.weight");
    /* a layer the base lacks */
    MERGE("extra-layer", "base");
    FILE_OF("extra-layer", "adapter_model.safetensors");
    expect_refused(dir, args, file, "layer 2");
    /* target modules: GPT-2's on a Llama, and one no architecture has */
    sh("cp -r '%s/good' '%s/gpt2-target' && cp -r '%s/good' '%s/foo-target'", dir, dir, dir, dir);
    replace_in_file(test_join(dir, "gpt2-target/adapter_config.json"), "\"q_proj\"", "\"c_attn\"");
    MERGE("gpt2-target", "base");
    FILE_OF("gpt2-target", "adapter_config.json");
    expect_refused(dir, args, file, "c_attn");
    replace_in_file(test_join(dir, "foo-target/adapter_config.json"), "\"q_proj\"", "\"foo_proj\"");
    MERGE("foo-target", "base");
    FILE_OF("foo-target", "adapter_config.json");
    expect_refused(dir, args, file, "foo_proj");
    /* no weights file */
    sh("cp -r '%s/good' '%s/no-weights' && rm '%s/no-weights/adapter_model.safetensors'", dir, dir, dir);
    MERGE("no-weights", "base");
    FILE_OF("no-weights", "adapter_model.safetensors");
    expect_refused(dir, args, file, "adapter_model.safetensors");
    /* a base without an adapted module's weight, and one whose weight does not match its config */
    sh("cp -r '%s/base' '%s/base-drop' && cp -r '%s/base' '%s/base-short' && cd '%s' && "
       PY " %s edit-base '%s/base-drop' --drop model.layers.1.self_attn.q_proj.weight + "
       "edit-base '%s/base-short' --bad-shape model.layers.0.mlp.down_proj.weight",
       dir, dir, dir, dir, root, ref, dir, dir);
    MERGE("good", "base-drop");
    FILE_OF("base-drop", "model.safetensors");
    expect_refused(dir, args, file, "model.layers.1.self_attn.q_proj.weight");
    MERGE("good", "base-short");
    FILE_OF("base-short", "model.safetensors");
    expect_refused(dir, args, file, "model.layers.0.mlp.down_proj.weight");
    /* the adapter's base is not a model directory */
    MERGE("good", "good");
    FILE_OF("good", "config.json");
    expect_refused(dir, args, file, "config.json");

    /* usage */
    snprintf(args, sizeof args, "merge --adapter '%s/good' --out '%s/out'", dir, dir);
    expect_refused(dir, args, "--base", "required");
    snprintf(args, sizeof args, "merge --base '%s/base' --out '%s/out'", dir, dir);
    expect_refused(dir, args, "--adapter", "required");
    snprintf(args, sizeof args, "merge --base '%s/base' --adapter '%s/good'", dir, dir);
    expect_refused(dir, args, "--out", "required");
    snprintf(args, sizeof args, "merge --base '%s/base' --adapter '%s/good' --out '%s/out' --dtype f16", dir, dir, dir);
    expect_refused(dir, args, "--dtype", "f16");
    snprintf(args, sizeof args, "merge --base '%s/base' --adapter '%s/good' --out '%s/out' --max-shard-size 5Gb", dir, dir,
             dir);
    expect_refused(dir, args, "--max-shard-size", "ambiguous");
    snprintf(args, sizeof args, "merge --base '%s/base' --adapter '%s/good' --out '%s/out' --config x.yaml", dir, dir, dir);
    expect_refused(dir, args, "--config", "merge");
    snprintf(args, sizeof args, "merge --base '%s/base' --adapter '%s/good' --out '%s/out' extra", dir, dir, dir);
    expect_refused(dir, args, "extra", "merge");
    snprintf(args, sizeof args, "sample --checkpoint x --base '%s/base'", dir);
    expect_refused(dir, args, "--base", "only for gtrain merge");
    /* --out: a directory holding files is never written over; a missing parent */
    cr_assert_eq(mkdir(test_join(dir, "full"), 0755), 0);
    test_write_file(test_join(dir, "full/keep.txt"), "keep\n", 5);
    snprintf(args, sizeof args, "merge --base '%s/base' --adapter '%s/good' --out '%s/full'", dir, dir, dir);
    expect_refused(dir, args, "full", "keep.txt");
    cr_assert_str_eq(read_text(test_join(dir, "full/keep.txt")), "keep\n");
    assert_no_tmp(dir, "full");
    snprintf(args, sizeof args, "merge --base '%s/base' --adapter '%s/good' --out '%s/no/such/out'", dir, dir, dir);
    expect_refused(dir, args, "no/such/out", "expected the directory that holds --out to exist");
#undef MERGE
#undef FILE_OF
    test_scratch_remove(dir);
}

Test(merge, a_write_that_fails_half_way_leaves_nothing, .timeout = 120) {
    const char *root = need_torch();
    const char *bin = need_bin();
    char dir[256];
    test_scratch_make(dir, sizeof dir, "gt_merge_efbig");
    sh(PY " '%s/tests/tools/hf_models.py' make '%s/tests/fixtures/hf_configs/tiny-llama.json' '%s/base' --seed 2", root,
       root, dir);
    sh(PY " '%s/tests/tools/peft_merge_ref.py' adapter '%s/base' '%s/ad' --targets q_proj --r 2", root, dir, dir);
    /* files of at most 100 x 512 bytes: the 430 KB weights file fails with EFBIG (SIGXFSZ is ignored) */
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "ulimit -f 100 && '%s' merge --base '%s/base' --adapter '%s/ad' --out '%s/out' "
             "--max-shard-size 30KB >'%s/stdout' 2>'%s/stderr'", bin, dir, dir, dir, dir, dir);
    int st = system(cmd);
    const char *e = read_text(test_join(dir, "stderr"));
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d: %s", st, e);
    cr_assert(strchr(e, '\n') == e + strlen(e) - 1, "not one line: %s", e);
    cr_assert(!exists(test_join(dir, "out")), "out was created");
    assert_no_tmp(dir, "out");
    test_scratch_remove(dir);
}

/* --out is checked before anything is read (a missing base is not the error reported): a link to a
 * directory ("link/" too) is never followed, an input directory is never the output; a killed
 * merge's temporary (its pid gone) is removed by the next merge to that name, a live one's kept */
Test(merge, out_checked_first_and_stale_temporaries_removed, .timeout = 180) {
    const char *root = need_torch();
    need_bin();
    char dir[256], args[4096];
    test_scratch_make(dir, sizeof dir, "gt_merge_out");
    sh(PY " '%s/tests/tools/hf_models.py' make '%s/tests/fixtures/hf_configs/tiny-llama.json' '%s/base' --seed 2", root,
       root, dir);
    sh(PY " '%s/tests/tools/peft_merge_ref.py' adapter '%s/base' '%s/ad' --targets q_proj --r 2", root, dir, dir);
    cr_assert_eq(mkdir(test_join(dir, "empty"), 0755), 0);
    cr_assert_eq(symlink("empty", test_join(dir, "link")), 0);
    cr_assert_eq(symlink("base", test_join(dir, "baselink")), 0);
    const char *outs[][2] = {{"link/", "symbolic link"}, {"link", "symbolic link"}, {"base", "base model directory"},
                             {"baselink/", "base model directory"}, {"ad", "adapter directory"}};
    for (int i = 0; i < 5; i++) {
        snprintf(args, sizeof args, "merge --base '%s/%s' --adapter '%s/ad' --out '%s/%s'", dir,
                 i < 2 ? "missing-base" : "base", dir, dir, outs[i][0]);
        expect_refused(dir, args, outs[i][0], outs[i][1]);
        cr_assert(strstr(read_text(test_join(dir, "stderr")), "--out"), "%s: --out not named", outs[i][0]);
    }
    struct stat sb;
    cr_assert(lstat(test_join(dir, "link"), &sb) == 0 && S_ISLNK(sb.st_mode));
    assert_no_tmp(dir, "link");
    assert_no_tmp(dir, "empty");
    /* a killed merge's temporary: a directory of shards named by a pid that is gone */
    pid_t gone = fork();
    cr_assert_geq(gone, 0);
    if (gone == 0) _exit(0);
    cr_assert_eq(waitpid(gone, NULL, 0), gone);
    char stale[128], live[128];
    snprintf(stale, sizeof stale, ".m.merge-%ld-AbCdEf", (long)gone);
    snprintf(live, sizeof live, ".m.merge-%ld-GhIjKl", (long)getpid());
    cr_assert_eq(mkdir(test_join(dir, stale), 0755), 0);
    char f[600];
    snprintf(f, sizeof f, "%s/%s/model.safetensors", dir, stale);
    test_write_file(f, "partial", 7);
    cr_assert_eq(mkdir(test_join(dir, live), 0755), 0);
    snprintf(args, sizeof args, "merge --base '%s/base' --adapter '%s/ad' --out '%s/m'", dir, dir, dir);
    cr_assert_eq(gtrain(dir, args), 0, "%s", read_text(test_join(dir, "stderr")));
    cr_assert(strstr(read_text(test_join(dir, "stderr")), stale), "the removal is not reported: %s",
              read_text(test_join(dir, "stderr")));
    cr_assert(!exists(test_join(dir, stale)), "%s was left", stale);
    cr_assert(exists(test_join(dir, live)), "a live merge's %s was removed", live);
    snprintf(f, sizeof f, "%s/m/config.json", dir);
    cr_assert(exists(f), "the merge wrote no model");
    test_scratch_remove(dir);
}

Test(merge, bf16_rounding_is_once_from_double) {
    /* every float: the same as fp32 -> bf16 (round to nearest even) */
    uint64_t s = 88172645463325252ULL;
    for (int k = 0; k < 200000; k++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        uint32_t u = (uint32_t)s;
        if (k < 4096) u = (u & 0xFFFF0000u) | 0x8000u; /* exact ties between two bf16 values */
        float f;
        memcpy(&f, &u, 4);
        if (isnan(f)) continue;
        float got = merge_round_bf16((double)f), want = gt_bf16_to_f32(gt_f32_to_bf16(f));
        cr_assert(got == want || (isinf(got) && isinf(want) && (got > 0) == (want > 0)),
                  "%a: %a, fp32's rounding gives %a", (double)f, (double)got, (double)want);
    }
    /* just below a tie: once from double goes down, through float it would tie and go up */
    double x = 1 + 3 * 0x1p-8 - 0x1p-40;
    cr_assert_eq(merge_round_bf16(x), 1 + 0x1p-7);
    cr_assert_eq(gt_bf16_to_f32(gt_f32_to_bf16((float)x)), 1 + 0x1p-6);
    cr_assert_eq(merge_round_bf16(-x), -(1 + 0x1p-7));
    /* ties to even, subnormals, the largest value, overflow, NaN */
    cr_assert_eq(merge_round_bf16(1 + 0x1p-8), 1.0f);
    cr_assert_eq(merge_round_bf16(1 + 3 * 0x1p-8), 1 + 0x1p-6);
    cr_assert_eq(merge_round_bf16(1.5 * 0x1p-133), 0x1p-132);
    cr_assert_eq(merge_round_bf16(0.5 * 0x1p-133), 0.0f);
    cr_assert_eq(merge_round_bf16(0x1.fep127), 0x1.fep127f);
    cr_assert_eq(merge_round_bf16(0x1.fefp127), 0x1.fep127f);
    cr_assert(isinf(merge_round_bf16(0x1.ffp127)) && merge_round_bf16(-0x1.ffp127) < 0);
    cr_assert(isinf(merge_round_bf16(1e300)));
    cr_assert(isnan(merge_round_bf16(NAN)));
    cr_assert_eq(merge_round_bf16(0.0), 0.0f);
}
