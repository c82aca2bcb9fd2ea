"""The registry's load-time check of its structure rules: every rule is a declared
:class:`~autograder.course.rules.base.Rule` with what its readers need, or the registry refuses
to load, naming the problem and the rule (:func:`autograder.course.registry.check_rules`)."""
from __future__ import annotations

import dataclasses

import pytest

from autograder.course import registry
from autograder.course.problems import REGISTRY
from autograder.course.reading import perturbations_of
from autograder.course.rules import base as rules
from autograder.course.rules import moe as rules_moe
from autograder.course.rules.ring import ring_rule

#: the same on every JAX: make test runs it, make test-latest leaves it out
pytestmark = pytest.mark.orchestration


@pytest.fixture
def reload(monkeypatch):
    """``reload(name, rules)``: the registry with problem ``name``'s rules replaced, loaded
    again (its check runs once more); both undone after the test."""
    registry.load_all()

    def load(name, new_rules):
        monkeypatch.setitem(REGISTRY, name,
                            dataclasses.replace(REGISTRY[name], rules=tuple(new_rules)))
        monkeypatch.setattr(registry, "_LOADED", False)
        return registry.load_all()

    return load


def _routed_rules(routed):
    """moe_all_to_all's rules with ``routed`` in place of its anti-gather rule."""
    return (rules.all_of(rules.uses_shard_map, rules_moe.no_activation_gather_over_x,
                         rules_moe.tokens_travel_all_to_all, routed),)


def test_the_course_rules_are_declared_and_load(reload):
    assert reload("moe_all_to_all", _routed_rules(
        rules_moe.all_to_all_carries_only_routed_tokens))
    for p in registry.problems():
        assert all(isinstance(r, rules.Rule) for r in p.rules), p.name
    # the rule that reads what the all_to_alls deliver declares the inputs it is measured on,
    # and the rule combining it declares them too: the reader measures them
    (moe,) = registry.get("moe_all_to_all").rules
    assert rules.RECEIVED_CHANGED in moe.reads
    assert perturbations_of(moe.parts) is perturbations_of((moe,)) \
        is rules_moe.unrouted_perturbations


def test_a_rule_that_lost_its_perturbations_is_refused(reload):
    bare = dataclasses.replace(rules_moe.all_to_all_carries_only_routed_tokens,
                               perturbations=None)
    # what the check prevents: nothing asks the reader to measure, so the anti-gather rule
    # would answer "does not apply" on every program and stop running, silently
    assert perturbations_of(_routed_rules(bare)) is None
    with pytest.raises(registry.RuleNotReady, match="problem 'moe_all_to_all'") as e:
        reload("moe_all_to_all", _routed_rules(bare))
    assert "'all_to_all_carries_only_routed_tokens'" in str(e.value)
    assert "declares no perturbations" in str(e.value)


def test_a_combined_rule_that_lost_its_perturbations_is_refused(reload):
    (moe,) = registry.get("moe_topk").rules
    with pytest.raises(registry.RuleNotReady, match="problem 'moe_topk'.*all_of") as e:
        reload("moe_topk", (dataclasses.replace(moe, perturbations=None),))
    assert "declares no perturbations" in str(e.value)


def test_a_plain_function_is_refused(reload):
    def no_rule(prog, mesh, problem):
        return None

    with pytest.raises(registry.RuleNotReady, match="problem 'roll_diff'.*is not a Rule"):
        reload("roll_diff", (no_rule,))


def test_a_rule_made_by_a_factory_the_self_check_cannot_find_is_refused(reload):
    @rules.rule_factory
    def local_factory():
        return rules.Rule(check=rules.uses_shard_map.check, name="local")

    with pytest.raises(registry.RuleNotReady,
                       match="problem 'roll_diff'.*'local'.*was made by .*local_factory"):
        reload("roll_diff", (local_factory(),))


def test_a_rule_the_self_check_cannot_find_by_name_is_refused(reload):
    renamed = dataclasses.replace(rules.no_compiled_collectives, name="renamed")
    with pytest.raises(registry.RuleNotReady,
                       match=r"problem 'roll_diff'.*'renamed' \(in the rule 'all_of\(uses_shard_map"
                             r",renamed\)'\) is not the attribute 'renamed'"):
        reload("roll_diff", (rules.all_of(rules.uses_shard_map, renamed),))


def test_a_ring_rule_of_an_unknown_variant_is_refused(reload):
    odd = dataclasses.replace(ring_rule("allgather"), variant="alltoall")
    with pytest.raises(registry.RuleNotReady,
                       match="problem 'matmul_allgather'.*ring variant 'alltoall'"):
        reload("matmul_allgather", (odd,))
