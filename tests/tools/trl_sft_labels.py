"""trl_sft_labels.py - the reference for gtrain's data formats (tests/test_data_formats.c): TRL's own
SFTTrainer dataset preparation (trl.SFTTrainer._prepare_dataset: EOS added, tokenized, completion
and assistant masks folded into `labels`) on the rows of a jsonl file or a JSON array file, its
columns renamed to TRL's names first (as a user of TRL would).

usage: trl_sft_labels.py TOKENIZER_DIR DATA_FILE [--chat-template=FILE] [NAME=COLUMN ...]
Conversational rows (messages) go through assistant_only_loss=True, with the training chat template
TRL swaps in when the model's has no {% generation %} markers (SFTTrainer.__init__ does the same).
prints one line per example: its input_ids, a tab, its labels (space-separated)."""
import json
import sys
import tempfile

from datasets import Dataset
from transformers import AutoTokenizer
from trl import SFTConfig, SFTTrainer
from trl.chat_template_utils import get_training_chat_template, has_generation_markers
from trl.data_utils import is_conversational


def rows(path):
    with open(path, encoding="utf-8") as f:
        if path.endswith(".jsonl"):
            return [json.loads(line) for line in f if line.strip()]
        return json.load(f)


def main():
    tok_dir, path = sys.argv[1], sys.argv[2]
    rest = [a for a in sys.argv[3:] if not a.startswith("--chat-template=")]
    rename = dict(a.split("=", 1) for a in rest)  # gtrain name -> file column
    tok = AutoTokenizer.from_pretrained(tok_dir)
    for a in sys.argv[3:]:
        if a.startswith("--chat-template="):
            with open(a.split("=", 1)[1], encoding="utf-8") as f:
                tok.chat_template = f.read()
    data = []
    for r in rows(path):
        data.append({name: r[col] for name, col in rename.items()} if rename else r)
    ds = Dataset.from_list(data)
    with tempfile.TemporaryDirectory() as out:
        chat = is_conversational(data[0])
        args = SFTConfig(output_dir=out, max_length=None, report_to=[], dataset_num_proc=None, use_cpu=True, bf16=False,
                         assistant_only_loss=chat)
        trainer = SFTTrainer.__new__(SFTTrainer)  # only the data preparation is used
        trainer.completion_only_loss = True if args.completion_only_loss is None else args.completion_only_loss
        trainer.chat_template = None
        if chat and not has_generation_markers(tok.chat_template):
            trainer.chat_template = get_training_chat_template(tok)
        trainer._tokenizer = tok
        ds = trainer._prepare_dataset(ds, tok, args, False, None, "train")
    for ex in ds:
        print(" ".join(map(str, ex["input_ids"])) + "\t" + " ".join(map(str, ex["labels"])))


if __name__ == "__main__":
    main()
