"""The one list of differential scenarios, assembled from the topic modules."""

from __future__ import annotations

from tests.server.difftools import (
    scenarios_blocking,
    scenarios_commands,
    scenarios_order,
    scenarios_parsing,
    scenarios_stats,
)
from tests.server.difftools.steps import Scenario, ScenarioList


def all_scenarios() -> list[Scenario]:
    """Every scenario, in a stable order (names are unique)."""
    s = ScenarioList()
    for module in (
        scenarios_commands, scenarios_stats, scenarios_parsing, scenarios_blocking,
        scenarios_order,
    ):
        module.add(s)
    return s.items


SCENARIOS = all_scenarios()
