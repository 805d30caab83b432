# The PyPI package Fraction 2.2.0 (https://github.com/bradley101/fraction, MIT licence: LICENSE
# beside this file), as its wheel Fraction-2.2.0-py3-none-any.whl ships it: MetaMath's eval_gsm8k.py
# and PiSSA's test_acc.py do `from fraction import Fraction`, and tests/tools/metamath_score.py runs
# them with this very package (Fraction.py is byte for byte the wheel's). Test reference only.
from .Fraction import Fraction
