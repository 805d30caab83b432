/* scorers.h - answer extraction and scoring for generation tasks, as the PiSSA / MetaMath
 * evaluation scripts do it (MetaMath's eval_gsm8k.py and eval_math.py with util.py), so an
 * accuracy printed by gtrain is the number those scripts print on the same generations.
 *
 * gsm8k: the prediction is the text after the last "The answer is: " (MetaMath's split on that
 *   string, element -1), its first number (the regex of extract_answer_number; a/b through the
 *   `fraction` package), rounded to an int as the script does (extracted "4" for "3.5"), compared
 *   numerically with the gold (the text after "#### " of GSM8K's answer field, commas removed; or
 *   the whole field when it has no "#### "). None when there is no such number.
 * math: the prediction is MetaMath's process_results: the text after the last "The answer is: "
 *   (none without it: the script has no \boxed fallback for the generation); the gold is the last
 *   \boxed{...} content of the solution (or the field itself when it has no \boxed / \fbox); both
 *   normalised by util.py's strip_string, compared as strings (is_equiv). */
#ifndef GT_SCORERS_H
#define GT_SCORERS_H

#include "common.h"

typedef enum { TASK_NONE = 0, TASK_GSM8K, TASK_MATH } GenTask;
/* "none", "gsm8k", "math" */
const char *gen_task_name(GenTask t);

typedef struct {
    char *extracted; /* the prediction as the script extracts it (malloc'd); NULL: none found */
    char *gold;      /* the gold answer as the script extracts it (malloc'd); NULL: none found */
    bool correct;
} ScoreResult;

/* Score one generation against the gold field's text (the dataset's answer / solution member, as
 * it is). Never fails: what cannot be extracted is NULL and incorrect. */
void score_answer(GenTask task, const char *generated, const char *gold_field, ScoreResult *out);
void score_result_free(ScoreResult *r);

/* The pieces, for the tests: */
/* MATH's last \boxed{..} content (last_boxed_only_string + remove_boxed), or NULL (also for an
 * \fbox{..} or "\boxed 5": MetaMath's remove_boxed takes only "\boxed{") */
char *score_math_last_boxed(const char *s);
/* util.py's strip_string (malloc'd); NULL where it raises (is_equiv then compares the raw strings) */
char *score_math_strip(const char *s);

#endif
