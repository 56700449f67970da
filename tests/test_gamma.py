"""--gamma auto: the choice is the cost model's optimum (pure functions), and on the real model
every mode it tunes still emits exactly `ar`'s greedy tokens while its choice lands in stats."""
import itertools
from types import SimpleNamespace

import pytest
import torch

from triforce.runtime import gamma
from triforce.runtime.gamma import (EXPLORE_TOKENS, REFRESH_ROUNDS, REPROBE_ROUNDS, SEEN_PASSES, GammaTuner, PassCost, auto_caps,
                                    choose, copy_length, corrected, expected_tokens, free_draft_seconds, load_costs, non_decreasing, per_token_acceptance,
                                    probe_lengths, probe_pass_costs, save_costs, seconds_per_token, smoothed_acceptance)
from triforce.runtime.speculate import LevelStats, PassTimes

FLAT = PassCost(((1, 0.010), (16, 0.010)))            # a GPU-like verifier: 16 tokens cost as much as 1


def test_pass_cost_is_linear_between_and_beyond_its_points():
    cost = PassCost(((1, 1.0), (2, 2.0), (4, 2.5)))
    assert cost(1) == 1.0 and cost(3) == 2.25 and cost(8) == 3.5 and PassCost(((1, 0.5),))(9) == 0.5


def test_seconds_per_token_follows_the_draft_schedule():
    drafter, middle, target = PassCost(((1, 0.001),)), PassCost(((1, 0.004), (8, 0.006))), FLAT
    a1, a2 = 0.5, 0.9
    # gamma2 = 1: the middle level proposes one token alone (k = min(gamma1, 0) = 0), the drafter idles
    assert seconds_per_token([drafter, middle, target], [a1, a2], (3, 1)) == \
        pytest.approx((middle(1) + target(2)) / expected_tokens(a2, 1))
    # gamma2 = 2, gamma1 = 1: one middle round proposes 1 drafter token and verifies it in a 2-token
    # pass; with probability a1 both tokens come out of it, else one more round (k = 0) follows
    two = drafter(1) + middle(2) + (1 - a1) * middle(1)
    assert seconds_per_token([drafter, middle, target], [a1, a2], (1, 2)) == \
        pytest.approx((two + target(3)) / expected_tokens(a2, 2))
    assert seconds_per_token([drafter, middle, target], [a1, a2], (0, 0)) == target(1)  # gamma2 0 = ar
    # with every draft accepted (alpha 1), gamma1 >= gamma2 - 1 costs one drafter run and one middle pass
    assert seconds_per_token([drafter, middle, target], [1.0, 1.0], (5, 6)) == \
        pytest.approx((5 * drafter(1) + middle(6) + target(7)) / 7)


def test_choose_speculates_deeply_when_verification_is_free_and_not_at_all_when_it_is_dear():
    cheap = PassCost(((1, 0.001),))
    gammas, _ = choose([cheap, FLAT], [0.95], [range(0, 13)])
    assert gammas == (12,)
    dear = PassCost(((1, 0.010), (13, 0.130)))        # a CPU-like verifier: cost grows with T
    gammas, best = choose([PassCost(((1, 0.009),)), dear], [0.3], [range(0, 13)])
    assert gammas == (0,) and best == dear(1)


def test_choose_is_the_best_pair_seconds_per_token_prices():
    """choose (one drafting table per lower γ) picks what a search over every γ pair priced by
    seconds_per_token picks, with the same seconds, for two- and three-level stacks."""
    g = torch.Generator().manual_seed(5)
    for trial in range(40):
        r = torch.rand(8, generator=g).tolist()
        drafter = PassCost(((1, 1e-4 + 1e-3 * r[0]),))
        middle = PassCost(((1, 2e-3 + 5e-3 * r[1]), (5, 8e-3 + 1e-2 * r[2])))
        target = PassCost(((1, 0.02 + 0.01 * r[3]), (13, 0.05 + 0.1 * r[4])))
        for costs, alphas, allowed in (([drafter, middle, target], [r[5], r[6]], [range(0, 5), range(0, 13)]),
                                       ([middle, target], [r[7]], [range(0, 13)])):
            every = min(((gs, seconds_per_token(costs, alphas, gs)) for gs in itertools.product(*allowed)),
                        key=lambda c: c[1])
            assert choose(costs, alphas, allowed) == every, trial


def level(drafted=0, accepted=0):
    """A level whose stats count every untested token as a rejection: its alpha is accepted / drafted."""
    return SimpleNamespace(stats=LevelStats(drafted=drafted, accepted=accepted, rejections=drafted - accepted))


def test_tuner_explores_a_level_without_distorting_the_levels_above():
    """A drafter that costs as much as the middle level does not pay. While it explores (fewer than
    EXPLORE_TOKENS drafted) it proposes 1 token in rounds that consult it, and the middle level
    still speculates as deep as the cost model wants (forcing γ1 >= 1 inside the optimum made the
    tuner shun every γ2 >= 2, the only γ2 that consults the drafter); once explored it is dropped."""
    costs = [PassCost(((1, 0.005),)), PassCost(((1, 0.005), (13, 0.008))), PassCost(((1, 0.012), (13, 0.027)))]
    tuner = GammaTuner([level(), level(), level(drafted=40, accepted=36)], costs, caps=(4, 12))
    g1, g2 = tuner.pick()
    unexplored, _ = choose(costs, tuner.alphas(), [range(0, 5), range(0, 13)])
    assert unexplored[0] == 0 and g2 == unexplored[1] >= 2 and g1 == 1
    tuner.stack[1].stats.drafted, tuner.stack[1].stats.accepted = EXPLORE_TOKENS, 2
    tuner.stack[1].stats.rejections = EXPLORE_TOKENS - 2
    g1, g2 = tuner.pick()
    assert g1 == 0 and g2 >= 2
    assert tuner.predicted == pytest.approx(seconds_per_token(costs, tuner.alphas(), (0, g2)), rel=0.02)
    # a drafter that pays at the prior is chosen by the optimum itself; poor drafts switch it off
    costs[0] = PassCost(((1, 0.001),))
    tuner = GammaTuner([level(), level(drafted=EXPLORE_TOKENS, accepted=12), level(drafted=40, accepted=36)],
                       costs, caps=(4, 12))
    assert tuner.pick()[0] >= 1
    tuner.stack[1].stats.drafted, tuner.stack[1].stats.accepted, tuner.stack[1].stats.rejections = 30, 1, 29
    assert tuner.pick()[0] == 0
    # the target's proposer explores too: at least 1 token even where the prior says speculation does not pay
    dear = PassCost(((1, 0.010), (13, 0.130)))
    tuner = GammaTuner([level(), level(), level()], [costs[0], PassCost(((1, 0.009),)), dear], caps=(4, 12))
    assert choose(tuner.costs, tuner.alphas(), [range(0, 5), range(0, 13)])[0][1] == 0 and tuner.pick()[1] == 1


def test_copy_length_follows_what_a_wider_pass_costs():
    """A copy's length maximizes expected tokens per second: where each token adds much to a pass
    (an AVX2 CPU's target at 7K: 35 ms for 1 token, 171 for 13) copies are short and grow with
    their acceptance; where a wider pass costs little they run to the longest allowed."""
    steep, flat = PassCost(((1, 0.035), (13, 0.171))), PassCost(((1, 0.020), (13, 0.0205)))
    lengths = [copy_length(steep, a, 16) for a in (0.3, 0.55, 0.8, 0.9, 0.95)]
    assert lengths == sorted(lengths) and lengths[0] == 1 and lengths[-1] < 16
    for n in range(1, 17):   # the chosen length is the best one
        assert expected_tokens(0.8, n) / steep(n + 1) <= expected_tokens(0.8, lengths[2]) / steep(lengths[2] + 1)
    assert copy_length(flat, 0.8, 16) == 16 and copy_length(flat, 0.8, 5) == 5


def test_tuner_caps_the_targets_copies_from_their_acceptance():
    """The decoder's copy_cap follows the top level's copies: copies that keep failing shorten them."""
    costs = [PassCost(((1, 0.001),)), PassCost(((1, 0.005), (13, 0.008))), PassCost(((1, 0.035), (13, 0.171)))]
    tuner = GammaTuner([level(), level(drafted=30, accepted=20), level(drafted=40, accepted=36)], costs, caps=(4, 12))
    decoder = SimpleNamespace(gammas=list(tuner.pick()), copy_cap=16)
    top = tuner.stack[-1].stats
    top.copied, top.copied_accepted, top.copy_rejections = 100, 95, 1      # copies nearly always right
    tuner(decoder)
    long = decoder.copy_cap
    top.copied, top.copied_accepted, top.copy_rejections = 200, 100, 60   # then mostly wrong
    tuner(decoder)
    assert long >= 6 and 1 <= decoder.copy_cap < long and tuner.copy_cap() == decoder.copy_cap


def test_tuner_prices_copy_rounds_in_its_stats():
    """stats.gamma prices a round verifying a context copy beside the draft rounds' prediction: one
    target pass of copy_cap + 1 over the tokens such a round commits at the copies' acceptance."""
    costs = [PassCost(((1, 0.001),)), PassCost(((1, 0.005), (13, 0.008))), PassCost(((1, 0.035), (13, 0.171)))]
    stack = [level(), level(drafted=30, accepted=20), level(drafted=40, accepted=36)]
    for lv, name in zip(stack, ("drafter", "retrieval", "target")):
        lv.name = name
    tuner = GammaTuner(stack, costs, caps=(4, 12))
    top = tuner.stack[-1].stats
    top.copied, top.copied_accepted, top.copy_rejections = 100, 95, 1      # copies nearly always right
    g = tuner.stats()["gamma"]
    cap, alpha = g["copy_cap"], smoothed_acceptance(95, 1)
    assert g["copy_predicted_ms_per_token"] == round(1000 * costs[-1](cap + 1) / expected_tokens(alpha, cap), 3)
    assert g["copy_predicted_ms_per_token"] < g["target_alone_ms_per_token"]     # right copies pay
    assert f"context copy of up to {cap} tokens" in g["reason"]
    top.copied, top.copied_accepted, top.copy_rejections = 200, 100, 60   # then mostly wrong: dearer per token
    assert tuner.stats()["gamma"]["copy_predicted_ms_per_token"] > g["copy_predicted_ms_per_token"]
    tuner.copies = False                                                  # --no-lookup: no copy rounds to price
    assert "copy_predicted_ms_per_token" not in tuner.stats()["gamma"] and "copy" not in tuner.stats()["gamma"]["reason"]


def test_no_stack_beats_its_top_levels_free_draft_bound():
    """free_draft_seconds is a floor: for any lower levels and γs, the stack's seconds per token
    are at least the top level's own passes per token at its acceptance with drafting free, and
    that floor is the best γ of the top level's cost per expected token."""
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        r = torch.rand(8, generator=g).tolist()
        costs = [PassCost(((1, 0.001 + 0.004 * r[0]),)), PassCost(((1, 0.004 + 0.01 * r[1]), (13, 0.02 + 0.05 * r[2]))),
                 PassCost(((1, 0.03 + 0.05 * r[3]), (13, 0.04 + 0.4 * r[4])))]
        alphas = [0.2 + 0.79 * r[5], 0.2 + 0.79 * r[6]]
        floor, best_g = free_draft_seconds(costs[-1], alphas[-1], 12)
        assert floor == pytest.approx(min(costs[-1](k + 1) / expected_tokens(alphas[-1], k) for k in range(0, 13)))
        assert floor == pytest.approx(costs[-1](best_g + 1) / expected_tokens(alphas[-1], best_g))
        for gammas in ((0, 0), (0, 1), (1, 2), (3, 5), (4, 12), (2, 7)):
            assert seconds_per_token(costs, alphas, gammas) >= floor - 1e-12
        assert free_draft_seconds(costs[-1], 1.0, 12)[0] <= floor      # right drafts: the lowest floor
    # a verifier whose passes cost as much per token as a 1-token pass gains nothing even from right drafts
    linear = PassCost(((1, 0.01), (13, 0.13)))
    assert free_draft_seconds(linear, 1.0, 12)[0] == pytest.approx(0.01)
    assert free_draft_seconds(linear, 0.9, 0) == (0.01, 0)            # no room to draft (one token left): the target alone
    dear = PassCost(((1, 0.01), (13, 0.37)))                          # each token 3x a 1-token pass: drafts never pay
    assert free_draft_seconds(dear, 0.5, 12) == (0.01, 0)


def test_tuner_reports_what_its_top_level_allows_with_free_drafts():
    """stats.gamma.ceiling: the target's own bound with free drafts at its acceptance and with right
    drafts, in ms per token, the γ2 of each, and the same in the reason."""
    costs = [PassCost(((1, 0.001),)), PassCost(((1, 0.005), (13, 0.008))), PassCost(((1, 0.035), (13, 0.171)))]
    stack = [level(), level(drafted=30, accepted=20), level(drafted=40, accepted=30)]
    for lv, name in zip(stack, ("drafter", "retrieval", "target")):
        lv.name = name
    tuner = GammaTuner(stack, costs, caps=(4, 12))
    assert tuner.pick()[-1] >= 1                        # the target verifies drafts here
    c = tuner.stats()["gamma"]["ceiling"]
    free, free_g = free_draft_seconds(costs[-1], tuner.alphas()[-1], 12)
    assert c["free_drafts_ms_per_token"] == round(1000 * free, 3) and c["free_drafts_gamma2"] == free_g
    assert c["right_drafts_ms_per_token"] <= c["free_drafts_ms_per_token"] <= tuner.stats()["gamma"]["predicted_ms_per_token"]
    assert f"allow {1000 * free:.1f} ms/token" in tuner.stats()["gamma"]["reason"]
    one_left = GammaTuner(stack, costs, caps=(0, 0))                  # a 1-token request: no room to draft
    assert one_left.pick() == (0, 0) and one_left.stats()["gamma"]["ceiling"]["free_drafts_gamma2"] == 0


def test_tuner_reprobes_a_level_it_switched_off():
    """A level switched off drafts nothing, so its acceptance estimate would never change: after
    REPROBE_ROUNDS rounds without drafting it proposes 1 token again, once, then the optimum rules."""
    costs = [PassCost(((1, 0.001),)), PassCost(((1, 0.005), (13, 0.008))), PassCost(((1, 0.012), (13, 0.027)))]
    tuner = GammaTuner([level(), level(drafted=30, accepted=1), level(drafted=40, accepted=36)], costs, caps=(4, 12))
    decoder = SimpleNamespace(gammas=list(tuner.pick()))
    assert decoder.gammas[0] == 0 and decoder.gammas[1] >= 2
    def one_round(drafted_by_drafter=0):
        tuner.stack[2].stats.drafted += decoder.gammas[1]     # the target verifies every round
        tuner.stack[2].stats.accepted += decoder.gammas[1]
        tuner.stack[1].stats.drafted += drafted_by_drafter
        tuner.stack[1].stats.rejections += drafted_by_drafter
        tuner(decoder)
    for _ in range(REPROBE_ROUNDS - 1):
        one_round()
        assert decoder.gammas[0] == 0        # switched off, drafting nothing
    one_round()
    assert decoder.gammas[0] == 1 and decoder.gammas[1] >= 2   # re-probed, in a round that consults it
    one_round(drafted_by_drafter=1)          # that round drafted one token (rejected)
    assert decoder.gammas[0] == 0 and tuner.idle == [0, 0]


def test_corrected_costs_keep_the_probes_shape_at_the_runs_level():
    """A probe taken while the machine was busier than the run (or its caches colder): the run's
    passes cost about half the probe's figures, one outlier aside. The costs keep the probe's
    shape (the step at T = 6) at the median ratio, which one slow pass does not move."""
    probed = PassCost(((1, 0.020), (5, 0.024), (6, 0.030), (13, 0.040)))
    recent = [(1, 0.010)] * 4 + [(5, 0.012)] * 4 + [(4, 0.500)]
    cost = corrected(probed, recent)
    assert [T for T, _ in cost.points] == [1, 5, 6, 13]
    assert cost(1) == pytest.approx(0.010) and cost(6) == pytest.approx(0.015) and cost(13) == pytest.approx(0.020)
    assert corrected(probed, recent[:SEEN_PASSES - 1]) is probed      # too few passes: the probe stands


def test_corrected_costs_count_only_passes_of_a_probed_length():
    """The drafter's probe times T = 1 alone; its catch-up passes (several committed tokens at a time) cost
    more than a 1-token pass and must not scale that figure (round 49: 0.3 -> 0.9-1.4 ms at 7K and 32K).
    Only passes whose length the probe spans count; with too few of them the probe stands."""
    probed = PassCost(((1, 0.0003),))
    catch_up = [(9, 0.0012)] * SEEN_PASSES
    assert corrected(probed, catch_up) is probed
    cost = corrected(probed, catch_up + [(1, 0.0006)] * SEEN_PASSES)
    assert cost(1) == pytest.approx(0.0006)
    middle = PassCost(((1, 0.0048), (5, 0.0080)))     # a pass of 12 is beyond its probe: not counted
    assert corrected(middle, [(2, 0.0050)] * SEEN_PASSES + [(12, 0.1)] * (SEEN_PASSES + 1))(1) == pytest.approx(0.0048 * 0.0050 / middle(2))


def test_a_slow_probe_pass_is_lowered_to_the_longer_passes_time():
    """Two of round 17's 32K probes (ms): one slow pass at T = 8, one at T = 1. Each is lowered to
    the least time of a longer pass; a curve without such a pass is left as it is."""
    slow_8 = ((1, 41.2), (2, 43.6), (4, 46.5), (5, 47.5), (6, 52.3), (8, 105.2), (12, 72.5), (13, 77.2))
    assert non_decreasing(slow_8) == ((1, 41.2), (2, 43.6), (4, 46.5), (5, 47.5), (6, 52.3), (8, 72.5), (12, 72.5), (13, 77.2))
    slow_1 = ((1, 95.6), (2, 45.4), (4, 47.9), (13, 74.1))
    assert non_decreasing(slow_1) == ((1, 45.4), (2, 45.4), (4, 47.9), (13, 74.1))
    clean = ((1, 22.2), (2, 23.0), (4, 23.6), (5, 24.3), (6, 25.4), (8, 26.7), (12, 31.1), (13, 32.3))
    assert non_decreasing(clean) == clean
    # the slow T = 8 priced γ2 = 7 (a pass of 8) above the 12 tokens' pass; lowered, it is cheaper
    assert PassCost(slow_8)(8) > PassCost(slow_8)(12) and PassCost(non_decreasing(slow_8))(8) <= PassCost(non_decreasing(slow_8))(12)


def test_a_short_request_probes_fewer_lengths():
    """128 tokens and more: every length up to the largest pass; fewer tokens, fewer lengths (1 and
    the largest at least, the step at 5-6 next); a level that only samples times T = 1."""
    assert probe_lengths(13, 128) == [1, 2, 4, 5, 6, 8, 12, 13] == probe_lengths(13, 4096)
    assert probe_lengths(13, 64) == [1, 5, 6, 13] and probe_lengths(13, 32) == [1, 13] == probe_lengths(13, 2)
    assert probe_lengths(5, 128) == [1, 2, 4, 5] and probe_lengths(5, 32) == [1, 5] and probe_lengths(1, 128) == [1]


def test_the_top_level_probes_within_a_share_of_the_request(monkeypatch):
    """The lower levels time their probe_lengths; the target T = 1 and its largest pass, then more
    lengths only while its probe stays within TOP_PROBE_SHARE of the request on the target alone.
    Each level's first pass is an untimed warm-up."""
    calls = []

    def fake_pass(level, T):
        calls.append((level.name, T))
        return level.cost(T)
    monkeypatch.setattr(gamma, "pass_seconds", fake_pass)
    stack = [SimpleNamespace(name="drafter", cache=SimpleNamespace(), cost=lambda T: 0.001),
             SimpleNamespace(name="middle", cache=SimpleNamespace(), cost=lambda T: 0.005 + 0.0005 * T),
             SimpleNamespace(name="target", cache=SimpleNamespace(), cost=lambda T: 0.080 + 0.006 * (T - 1))]
    short = probe_pass_costs(stack, (4, 12), 128)   # budget 4 x 80 ms: T = 1 and 13 take 232, T = 5 (~104) no longer fits
    assert [p[0] for p in short[2].points] == [1, 13] and [p[0] for p in short[1].points] == [1, 2, 4, 5]
    assert [p[0] for p in short[0].points] == [1] and short[2](7) == pytest.approx(0.080 + 0.006 * 6)
    assert calls == [("drafter", 1), ("drafter", 1), ("middle", 1), ("middle", 1), ("middle", 2), ("middle", 4),
                     ("middle", 5), ("target", 1), ("target", 1), ("target", 13)]
    calls.clear()
    long = probe_pass_costs(stack, (4, 12), 1024)   # 32 x 80 ms: every length
    assert [p[0] for p in long[2].points] == [1, 2, 4, 5, 6, 8, 12, 13]
    assert [T for name, T in calls if name == "target"] == [1, 1, 13, 5, 6, 2, 8, 12, 4]
    middle = probe_pass_costs(stack, (4, 12), 250)  # 7.8 x 80 ms: 1 and 13 (2.9 of it), then 5, 6, 2 (3.8 more), not 8 (1.5)
    assert [p[0] for p in middle[2].points] == [1, 2, 5, 6, 13]


def test_stored_costs_come_back_for_the_same_shape_only(tmp_path, monkeypatch, capsys):
    costs = [PassCost(((1, 0.001),)), PassCost(((1, 0.0071), (5, 0.0086))), PassCost(((1, 0.0846), (13, 0.162)))]
    key = ("shape", (4, 12), 2, 1024, 103)
    assert load_costs(key, 3) is None                                   # nothing stored yet
    save_costs(key, costs)
    assert load_costs(key, 3) == costs
    assert load_costs(("shape", (4, 12), 2, 1024, 104), 3) is None      # another context bucket
    assert load_costs(key, 2) is None                                   # a stack of another height
    for path in (tmp_path / "pass_costs").iterdir():                    # a torn or foreign file: probe again
        path.write_text("{not json")
    assert load_costs(key, 3) is None
    blocked = tmp_path / "a_file"
    blocked.write_text("")
    monkeypatch.setattr(gamma, "stored_costs_dir", lambda: blocked / "pass_costs")
    monkeypatch.setattr(gamma, "_save_failed", [])
    save_costs(key, costs)                                              # not writable: the request goes on,
    save_costs(key, costs)                                              # one line on stderr per process
    err = capsys.readouterr().err
    assert err.count("could not store pass costs") == 1 and str(blocked) in err and "TRIFORCE_CACHE" in err


def test_stored_costs_are_keyed_by_every_native_source_headers_included(tmp_path, monkeypatch):
    # a change to a shared header (runs.h: how the kernels split work) changes pass costs too
    import shutil
    from triforce.runtime import native
    csrc = tmp_path / "csrc"
    shutil.copytree(native.CSRC, csrc)
    monkeypatch.setattr(native, "CSRC", csrc)
    before = gamma.machine_fingerprint.__wrapped__()
    assert gamma.machine_fingerprint.__wrapped__() == before
    (csrc / "runs.h").write_text((csrc / "runs.h").read_text() + "\n// changed\n")
    assert gamma.machine_fingerprint.__wrapped__() != before


def test_pass_times_keep_the_last_window_of_passes():
    times = PassTimes()
    for T in range(PassTimes.WINDOW + 5):
        times.add(T, 0.001)
    assert len(times.recent) == PassTimes.WINDOW and times.recent[0] == (5, 0.001)


def test_tuner_rescales_the_probe_by_the_passes_it_sees():
    """A probe that priced the middle level dearer than the target makes the tuner skip it; once
    the run's own passes show the middle level ten times cheaper (after REFRESH_ROUNDS rounds) it
    drafts with it, says so in its reason, and keeps both figures in stats."""
    def timed_level(name, drafted, accepted, seconds):
        lv = SimpleNamespace(stats=LevelStats(drafted=drafted, accepted=accepted, rejections=drafted - accepted),
                             times=PassTimes(), model=SimpleNamespace(device=torch.device("cpu")), name=name)
        for _ in range(SEEN_PASSES):
            lv.times.add(*seconds)
        return lv
    probed = [PassCost(((1, 0.001),)), PassCost(((1, 0.040), (5, 0.042))), PassCost(((1, 0.020), (13, 0.030)))]
    stack = [timed_level("drafter", 0, 0, (1, 0.001)), timed_level("retrieval", 40, 36, (3, 0.0041)),
             timed_level("target", 40, 36, (1, 0.020))]
    tuner = GammaTuner(stack, list(probed), caps=(4, 12))
    decoder = SimpleNamespace(gammas=list(tuner.pick()))
    assert decoder.gammas[1] == 0                       # the middle level does not pay at the probe's price
    for _ in range(REFRESH_ROUNDS):
        tuner(decoder)
    assert tuner.probed == probed and tuner.costs[1](1) == pytest.approx(0.004) and tuner.costs[1](5) == pytest.approx(0.0042)
    assert decoder.gammas[1] >= 2
    assert tuner.predicted == pytest.approx(seconds_per_token(tuner.costs, tuner.alphas(), tuple(decoder.gammas)))
    stats = tuner.stats()["gamma"]
    assert "corrected by the passes run since" in stats["reason"]
    assert stats["probe_pass_ms"]["retrieval"]["5"] == 42.0 and stats["pass_ms"]["retrieval"]["5"] == pytest.approx(4.2)


def test_per_token_acceptance_is_unbiased_where_drafted_over_accepted_is_not():
    """Rounds of γ = 6 offered tokens, each accepted with probability 0.9 until the first rejection
    (what verify_round counts): accepted / (accepted + rejections) recovers 0.9, accepted / drafted
    reads ~0.75 (the untested tokens after a rejection counted as failures)."""
    gen = torch.Generator().manual_seed(0)
    stats = LevelStats()
    for _ in range(4000):
        passed = torch.rand(6, generator=gen) < 0.9
        num = int(passed.long().cumprod(0).sum())
        stats.drafted += 6
        stats.accepted += num
        stats.rejections += num < 6
    assert per_token_acceptance(stats) == pytest.approx(0.9, abs=0.01)
    assert stats.accepted / stats.drafted < 0.8


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_verify_round_counts_rejections(temperature):
    """One rejection per round that ends at a rejected token, none for a round accepting all; by the
    rule on distributions (T > 0) and by the argmaxes alone (T = 0: accept_greedy)."""
    from triforce.runtime.sampling import SamplingParams
    from triforce.runtime.speculate import verify_round
    class Table:   # a level whose distribution after any prefix is one-hot at a fixed token
        params = SamplingParams(temperature=temperature)
        def __init__(self, name, token):
            self.name, self.token, self.stats = name, token, LevelStats()
        def probs(self, seq, k):
            assert temperature > 0
            return torch.nn.functional.one_hot(torch.full((k,), self.token), 5).float()
        def greedy_tokens(self, seq, k):
            assert temperature == 0
            return [self.token] * k
    gen = torch.Generator().manual_seed(0)
    agree, disagree = [Table("d", 1), Table("t", 1)], [Table("d", 2), Table("t", 1)]
    tokens, _ = verify_round(agree, [3], [0], 3, gen)
    assert tokens == [1, 1, 1, 1] and (agree[1].stats.accepted, agree[1].stats.rejections) == (3, 0)
    tokens, _ = verify_round(disagree, [3], [0], 3, gen)
    assert tokens == [1] and (disagree[1].stats.accepted, disagree[1].stats.rejections) == (0, 1)


def test_extension_pays_after_sure_drafts_and_not_after_doubtful_ones():
    """GammaTuner.extension_pays: a 7K-like stack (target 10 ms a pass + 2 ms a row, middle 3 ms):
    after drafts its proposer was sure of (and which passed), one more costs ~5 ms for ~0.99 of a
    token against ~6.5 ms a token, so it pays, even where doubtful drafts pulled the target's mean
    acceptance down to ~0.5 (the next token is priced as a sure one); after doubtful ones that often
    failed it does not.
    Extension tokens stay out of the acceptance the γs are chosen with."""
    from triforce.runtime.gamma import sure_acceptance, unsure_acceptance
    stack = [SimpleNamespace(name=n, stats=LevelStats()) for n in ("drafter", "retrieval", "target")]
    costs = [PassCost(((1, 0.0005),)), PassCost(((1, 0.003), (5, 0.005))), PassCost(((1, 0.010), (13, 0.034)))]
    tuner = GammaTuner(stack, costs, caps=(4, 12))
    top = stack[-1].stats
    top.accepted, top.rejections, top.sure, top.sure_accepted = 90, 30, 60, 60   # sure: all passed; unsure: 30 of 60
    tuner.pick()
    assert sure_acceptance(top) > 0.98 and unsure_acceptance(top) < 0.6
    assert tuner.extension_pays([True, True], 2, 2)                  # drafts the proposer was sure of
    assert not tuner.extension_pays([False, False, True], 2, 3)      # two doubtful ones first
    top.accepted, top.rejections = 60, 60    # the doubtful drafts all failed: a mean per-token acceptance ~0.5
    tuner.pick()
    assert tuner.alphas()[-1] < 0.55 and tuner.extension_pays([True, True], 2, 2)   # the next one priced as sure
    top.accepted, top.rejections = 90, 30
    top.extended, top.extended_accepted, top.extended_rejections = 10, 10, 0
    assert per_token_acceptance(top) == smoothed_acceptance(80, 30)


def test_auto_caps_never_exceed_the_tokens_left():
    assert auto_caps(3, 256) == (4, 16) and auto_caps(2, 256) == (16,) and auto_caps(3, 5) == (4, 4)
    assert auto_caps(2, 1) == (0,)


@pytest.mark.slow
def test_auto_gamma_is_lossless_and_reported(default_model_dir, cut_drafter):
    from triforce.runtime.assets import kjv_books
    from triforce.runtime.config import RunConfig
    from triforce.runtime.engine import Engine
    engine = Engine(RunConfig(model=str(default_model_dir), mode="triforce", draft_model=str(cut_drafter)))
    ids = engine.tokenizer.encode(kjv_books(["Jonah"]))[:301]
    base = dict(model=str(default_model_dir), draft_model=str(cut_drafter), max_new_tokens=24, retrieval_budget=96,
                draft_sinks=4, draft_window=60)
    expected = engine.generate(ids, RunConfig(mode="ar", **base)).token_ids
    for mode in ("spec", "retrieval", "triforce"):
        result = engine.generate(ids, RunConfig(mode=mode, gamma="auto", **base))
        assert result.token_ids == expected, mode
        g = result.stats["gamma"]
        assert g["policy"] == "auto" and len(g["gammas"]) == (2 if mode == "triforce" else 1), mode
        assert sum(g["rounds_per_choice"].values()) >= 1 and "predicted" in g["reason"]
        assert set(g["pass_ms"]) == set(result.stats["levels"]) and g["pass_ms"]["target"]["1"] > 0
        assert not g["probe_reused"] and g["probe_s"] > 0, mode               # each mode's first request probes
        assert 1 <= g["copy_cap"] <= 16 and result.stats["levels"]["target"]["copy_rejections"] >= 0, mode
        target = result.stats["levels"]["target"]   # drafts past γ2 while sure (speculate.Extension): still `ar`'s tokens
        assert g["extension"]["tokens"] == target["extended"] <= target["drafted"], mode
        assert 0 <= target["sure_accepted"] <= target["sure"] and 0 < g["extension"]["sure_acceptance"] <= 1, mode
    assert "gamma" not in engine.generate(ids, RunConfig(mode="triforce", gamma="fixed", **base)).stats
    assert "gamma" not in engine.generate(ids, RunConfig(mode="triforce", temperature=0.6, **base)).stats  # sampled: fixed
    unset = engine.generate(ids, RunConfig(mode="triforce", **base))                # greedy, gamma unset: auto
    assert unset.token_ids == expected and unset.stats["gamma"]["policy"] == "auto"
    # a second request of the same shape (another seed, another temperature) takes the first one's costs
    again = engine.generate(ids, RunConfig(mode="triforce", gamma="auto", **base))
    g = again.stats["gamma"]
    assert again.token_ids == expected and g["probe_reused"] and g["probe_s"] == 0 and "earlier request" in g["reason"]
    sampled = engine.generate(ids, RunConfig(mode="triforce", gamma="auto", temperature=0.6, seed=3, **base))
    assert sampled.stats["gamma"]["probe_reused"]
    # half the context is another shape: probed again
    shorter = engine.generate(ids[:151], RunConfig(mode="triforce", gamma="auto", **base))
    assert not shorter.stats["gamma"]["probe_reused"] and shorter.stats["gamma"]["probe_s"] > 0
    # another process (a fresh engine) of the same shape starts from the stored costs
    fresh = Engine(RunConfig(model=str(default_model_dir), mode="triforce", draft_model=str(cut_drafter)))
    stored = fresh.generate(ids, RunConfig(mode="triforce", gamma="auto", **base))
    assert stored.token_ids == expected and stored.stats["gamma"]["probe_reused"] and stored.stats["gamma"]["probe_s"] == 0


@pytest.mark.slow
def test_drafts_extended_to_the_cap_keep_ars_tokens(default_model_dir, cut_drafter, monkeypatch):
    """Every round's draft taken on to γ2's cap whatever the proposer's confidence (the longest
    verify passes extension can make, on the real caches): greedy `triforce` still gives `ar`'s
    tokens, and the extension tokens are counted (and shown on the summary line)."""
    from triforce.runtime.assets import kjv_books
    from triforce.runtime.config import RunConfig
    from triforce.runtime.engine import Engine
    from triforce.runtime.speculate import Extension
    monkeypatch.setattr(GammaTuner, "extension", lambda self: Extension(0.0, self.caps[-1]))
    engine = Engine(RunConfig(model=str(default_model_dir), mode="triforce", draft_model=str(cut_drafter)))
    ids = engine.tokenizer.encode(kjv_books(["Ruth"]))[:301]
    base = dict(model=str(default_model_dir), draft_model=str(cut_drafter), max_new_tokens=40, retrieval_budget=96,
                draft_sinks=4, draft_window=60)
    expected = engine.generate(ids, RunConfig(mode="ar", **base)).token_ids
    result = engine.generate(ids, RunConfig(mode="triforce", gamma="auto", lookup=False, **base))
    assert result.token_ids == expected
    target = result.stats["levels"]["target"]
    assert target["extended"] > 0 and target["extended_accepted"] <= target["extended"] <= target["drafted"]
    from triforce.runtime.cli import summary_line
    assert f"target took {target['extended_accepted']}/{target['extended']} drafts past gamma while sure" in summary_line(result)


def test_pass_cost_key_follows_what_a_pass_costs():
    from triforce.runtime.config import RunConfig
    from triforce.runtime.engine import pass_cost_key
    run = RunConfig(mode="triforce", gamma="auto", middle_weights="int4")
    key = pass_cost_key(run, 7168, (4, 12))
    same = RunConfig(mode="triforce", gamma="auto", middle_weights="int4", temperature=0.6, seed=9, max_new_tokens=64,
                     prompt="another prompt")
    assert pass_cost_key(same, 7168, (4, 12)) == key and pass_cost_key(run, 7000, (4, 12)) == key   # the same 1/8 octave
    assert pass_cost_key(run, 8192, (4, 12)) != key and pass_cost_key(run, 7168, (4, 5)) != key
    assert pass_cost_key(RunConfig(mode="triforce", gamma="auto", middle_weights="int8"), 7168, (4, 12)) != key


def test_a_batched_pass_is_priced_at_the_packed_pass_not_the_wait_for_other_sequences(monkeypatch):
    """In batched decoding a sequence's model call waits until every live sequence has asked for a
    pass, and the batcher runs other weights' passes first: the call's wall time is not what a
    pass of that level costs. Level.feed and the probe (decode.pass_timed)
    take the packed pass's own seconds that the batcher reports."""
    import threading
    import time
    from triforce.runtime import decode_batched as db
    from triforce.runtime.decode import pass_timed

    def packed_pass(model, requests):   # a pass of 50 ms
        time.sleep(0.05)
        return [torch.zeros(1, 1, 4) for _ in requests]

    monkeypatch.setattr(db, "packed_pass", packed_pass)
    cfg = SimpleNamespace(num_layers=1, hidden_size=1, intermediate_size=1)
    target, drafter = SimpleNamespace(cfg=cfg), SimpleNamespace(cfg=cfg)
    batcher = db.Batcher(2)
    a, b = db.SequenceModel(target, batcher), db.SequenceModel(drafter, batcher)
    timed = {}

    def seq_a():
        began = time.perf_counter()
        _, seconds = pass_timed(a, torch.zeros(1, 1), None)
        timed["a"] = (time.perf_counter() - began, seconds)
        batcher.finished()

    def seq_b():   # works 300 ms before its own pass: sequence a's call waits that long
        time.sleep(0.3)
        b(torch.zeros(1, 1), None)
        batcher.finished()

    threads = [threading.Thread(target=f) for f in (seq_a, seq_b)]
    for t in threads:
        t.start()
    batcher.run_until_done()
    for t in threads:
        t.join()
    wall, seconds = timed["a"]
    assert wall > 0.3                                            # the call waited for sequence b ...
    assert a.last_seconds == seconds and 0.04 < seconds < 0.25   # ... the pass is priced at its own 50 ms
