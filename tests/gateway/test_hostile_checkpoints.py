"""What a provider writes into a checkpoint's metadata reaches the metrics route: only finite
numbers under short names are shown, counts only when whole, so no claim turns into a 500."""

from __future__ import annotations

import json

from marketplace.gateway.api.schemas import JobMetrics
from marketplace.gateway.api.service import METRIC_FIELDS, _metric
from marketplace.gateway.checkpoints import shown_metrics


def test_only_finite_numbers_under_short_names_are_kept():
    claimed = {
        "loss": float("nan"),
        "eval_loss": float("inf"),
        "lr": "0.1",
        "grad_norm": True,
        "tokens": 1.5,
        "end_step": 40,
        "x" * 65: 1.0,
        "seconds": [1, 2],
    }
    assert shown_metrics(claimed) == {"tokens": 1.5, "end_step": 40}
    assert shown_metrics(["loss", 1.0]) == {}
    assert len(shown_metrics({f"m{i}": i for i in range(1000)})) == 64


def test_a_hostile_units_figures_serialize_as_the_schema_says():
    shown = shown_metrics({"tokens": 1.5, "end_step": 40, "loss": 2})
    unit = {"slot": 0, "index": 0, "cid": "bafy"} | {
        k: _metric(shown.get(k), k) for k in METRIC_FIELDS
    }
    body = {"status": "running", "units_done": 1, "units_total": 1, "accrued": 0, "loss": None}
    metrics = JobMetrics.model_validate(body | {"units": [unit]})
    assert json.loads(metrics.model_dump_json())["units"][0] == unit | {"tokens": None}
