"""Gate speculative decoding in CI without pytest, on the built-in tiny CPU models.

python examples/gate_tiny.py --save baseline.json     # on the reference commit
python examples/gate_tiny.py --compare baseline.json  # on a change: exit 1 on a regression
"""

import argparse
import sys

from pytest_specdecode import RunRecord
from pytest_specdecode.tiny import ENGINE_KWARGS, tiny_models
from pytest_specdecode.tiny.corpus import prompts

parser = argparse.ArgumentParser()
mode = parser.add_mutually_exclusive_group(required=True)
mode.add_argument("--save", metavar="BASELINE", help="save this run as the baseline")
mode.add_argument("--compare", metavar="BASELINE", help="compare this run with the baseline")
args = parser.parse_args()

# The plugin's options as keywords; paths and the baseline are checked before anything starts.
# Leaving the block writes the files; should the script fail inside it, what was measured is
# still written and the script exits 3 (Ctrl-C: 130), never 0 or 1.
with RunRecord(
    report="run.json", html="run.html", save=args.save, compare=args.compare,
    compare_fail="speedup:10%", baseline_trials=20,
) as record:  # fmt: skip
    models = tiny_models()  # a trained target and a one-layer draft; no download
    draft = {"method": "draft_model", "model": str(models.draft), "num_speculative_tokens": 4}
    with record.bench(models.target, draft, ENGINE_KWARGS, name="tiny-draft") as bench:
        bench.run(prompts("structured", 4, seed=1), max_tokens=32, label="structured")
sys.exit(record.status)  # 0; 1 when a figure regressed against the baseline; 2 bad input
