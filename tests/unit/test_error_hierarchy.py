"""Every public exception hermes-opd defines derives from `HermesOPDError`, and there is one
`ConfigError` (a `ValueError`, so callers that catch the stdlib type keep working)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from hermes_opd.contract.errors import ConfigError, HermesOPDError

PACKAGES = ("hermes_opd", "environments", "judge", "scoring", "trainer_adapters")
SKIP = (
    "hermes_opd.bench",  # benchmarks define no errors; some import optional heavy deps
    "environments.tasks.suite_child",  # stdlib-only script run inside the sandbox, not a project module
    "environments.tasks.code_candidate_child",  # the same, for code-style suites (the solution's side)
    "environments.tasks.code_tests_child",  # the same (the dataset's test code's side)
)


def project_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for package in PACKAGES:
        root = importlib.import_module(package)
        names = [package] + [m.name for m in pkgutil.walk_packages(root.__path__, package + ".")]
        for name in names:
            if name.startswith(SKIP) or name.endswith("__main__"):
                continue
            module = importlib.import_module(name)
            for attr, value in vars(module).items():
                if (
                    inspect.isclass(value)
                    and issubclass(value, BaseException)
                    and value.__module__ == name
                    and not attr.startswith("_")
                ):
                    found[f"{name}.{attr}"] = value
    return found


def test_every_project_exception_derives_from_the_base():
    found = project_exceptions()
    assert len(found) >= 20
    assert [name for name, cls in found.items() if not issubclass(cls, HermesOPDError)] == []


def test_one_config_error():
    found = project_exceptions()
    assert [name for name in found if name.endswith(".ConfigError")] == [
        "hermes_opd.contract.errors.ConfigError"
    ]
    assert issubclass(ConfigError, ValueError)
