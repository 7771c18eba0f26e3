"""One validator per served model: each pool has its own tokenizer and context length.

Built from the config and the pools at start-up and on each reload (reload is start-up again):
a model that appears gets a validator (its tokenizer loading at once when the proxy runs), one
whose source changed is reconfigured, one that is gone is closed.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterable

from llmd.config import Config
from llmd.engine.client import EngineClient
from llmd.validation.validator import ContextSource, ModelSource, Validator


class Validators:
    """The validators by model name. `client_of(model)` gives a client of a backend serving the
    model (its /tokenize), `limits_of(model)` where its context length comes from."""

    def __init__(
        self,
        client_of: Callable[[str], EngineClient],
        limits_of: Callable[[str], ContextSource],
    ) -> None:
        self.client_of = client_of
        self.limits_of = limits_of
        self._validators: dict[str, Validator] = {}
        self._loading = False

    def configure(self, config: Config, models: Iterable[ModelSource]) -> None:
        """Make, reconfigure or close validators so that there is one per model in `models`."""
        wanted = {model.name: model for model in models}
        for name in set(self._validators) - set(wanted):
            self._validators.pop(name).close()
        for name, model in wanted.items():
            validator = self._validators.get(name)
            if validator is not None:
                validator.configure(config, model)
                continue
            validator = Validator(
                config, self.limits_of(name), functools.partial(self.client_of, name), model
            )
            self._validators[name] = validator
            if self._loading:
                validator.start_loading()

    def for_model(self, model: str) -> Validator:
        """The validator of `model`. Raises KeyError when llmd serves no such model."""
        return self._validators[model]

    def models(self) -> list[str]:
        """The models that have a validator."""
        return list(self._validators)

    def start_loading(self) -> list[asyncio.Task[None]]:
        """Load every tokenizer (and each new model's from now on). Needs a running loop."""
        self._loading = True
        return [validator.start_loading() for validator in self._validators.values()]

    def loaded(self) -> bool:
        """Whether every model's tokenizer load has been started and has ended (loaded or
        fallen back to the engine's /tokenize)."""
        tasks = [validator.loading for validator in self._validators.values()]
        return self._loading and all(task is not None and task.done() for task in tasks)

    def close(self) -> None:
        """Stop the loads under way and close the tokenizers."""
        self._loading = False
        for validator in self._validators.values():
            validator.close()


def model_sources(config: Config, upstream_models: Iterable[str] = ()) -> list[ModelSource]:
    """What validation reads each model from: the first engine serving it (its model directory,
    or `validation.tokenizer_path` when llmd serves one model; its args), else nothing local
    (an upstream's model: counted through its /tokenize). `upstream_models` adds the models
    upstreams listed that the config does not name."""
    sources: dict[str, ModelSource] = {}
    engines = config.engine_tables
    names = {engine.model_name for engine in engines.values()} | set(config.served_models())
    single = len(names | set(upstream_models)) == 1
    for engine in engines.values():
        if engine.model_name not in sources:
            path = (config.validation.tokenizer_path if single else "") or engine.model
            sources[engine.model_name] = ModelSource(engine.model_name, path, engine.args)
    for model in [*config.served_models(), *upstream_models]:
        if model not in sources:
            path = config.validation.tokenizer_path if single else ""
            sources[model] = ModelSource(model, path)
    return list(sources.values())
