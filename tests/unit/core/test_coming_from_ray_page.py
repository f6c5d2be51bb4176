"""docs/coming-from-ray.md stays true: every actorrt name it gives exists, and every Ray
option it says actorrt refuses is refused, with its hint."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import actorrt
from actorrt.options import ActorOptions, FunctionOptions

PAGE = (Path(__file__).resolve().parents[3] / "docs" / "coming-from-ray.md").read_text()


def test_every_actorrt_name_on_the_page_exists():
    names = sorted(set(re.findall(r"`(?:@)?actorrt\.([A-Za-z_]+)", PAGE)))
    assert len(names) > 12, names  # the table was read
    missing = [name for name in names if not hasattr(actorrt, name)]
    assert not missing, f"docs/coming-from-ray.md names {missing}, which actorrt lacks"


def test_the_method_options_on_the_page_are_actorrt_methods_options():
    row = next(line for line in PAGE.splitlines() if line.startswith("| `@ray.method"))
    for option in re.findall(r"`(\w+)`", row.split("|")[3]):
        value = False if option == "retry_exceptions" else 1
        actorrt.method(**{option: value})  # taken, not refused


@pytest.mark.parametrize(
    "option",
    [
        "resources",
        "scheduling_strategy",
        "placement_group",
        "lifetime",
        "namespace",
        "memory",
        "runtime_env",
    ],
)
def test_each_ray_option_the_page_says_is_refused_is_refused_with_a_hint(option):
    assert f"`{option}" in PAGE
    for options in (ActorOptions, FunctionOptions):
        with pytest.raises(TypeError, match=f"'{option}': "):
            options.from_kwargs({option: None})
