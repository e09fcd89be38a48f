"""Our models build their validators on first use (`schemas.base`: `defer_build`); the
first validations may come from several threads at once (the server plans in worker
threads). A pydantic whose deferred build is not safe there validates with the parent's
validator and reports a field as an extra input (pydantic#11849, fixed in 2.11.5:
pyproject's floor). This guards a lock refresh against such a regression; it did not
reproduce the report on 2.11.4 here (the GIL makes the window small)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from schemas.base import StrictModel


def _fresh_model() -> type[StrictModel]:
    class Fresh(StrictModel):  # a new class each time: its validator is not built yet
        count: int = 0
        name: str = ""

    return Fresh


def test_first_validations_from_many_threads_use_the_models_own_validator() -> None:
    failures: list[str] = []
    for _ in range(50):
        model = _fresh_model()

        def validate(index: int, model: type[StrictModel] = model) -> None:
            try:
                model.model_validate({"count": index, "name": "x"})
            except Exception as error:  # what the race raises: "Extra inputs are not permitted"
                failures.append(str(error))

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(validate, range(32)))
    assert failures == []
