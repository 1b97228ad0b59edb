from __future__ import annotations

from pathlib import Path

import pytest

from gahp.core.errors import InvalidJob
from gahp.core.job import ce_requirements, parse_submit_ad, split_args_v1, split_args_v2, split_env_v1, split_env_v2
from gahp.core.jobstate import JobState, Phase

DATA = Path(__file__).parent.parent / "data"


def ad(**attrs: str) -> str:
    base = {"Cmd": '"/bin/pilot"', "Iwd": '"/home/pilot"', "JobDirectory": '"home_bl_ce_1.0"'}
    base.update(attrs)
    return "[ " + "; ".join(f"{k} = {v}" for k, v in base.items() if v is not None) + " ]"


def test_the_real_23_9_6_submit_ad() -> None:
    job = parse_submit_ad((DATA / "submit-ad-23.9.6.ad").read_text())
    assert job.executable == "/bin/sleep"
    assert job.arguments == ("30",)
    assert job.environment == ()
    assert job.iwd == "/home/pilot"
    assert job.stdin is None
    assert job.stdout == "/home/pilot/p.out" and job.stderr == "/home/pilot/p.err"
    assert job.sandbox_id == "127.0.0.1_vm_2.0_1795297304"
    assert job.job_directory == "home_bl_127.0.0.1_vm_2.0_1795297304"
    assert job.memory_mb == 2048 and job.cpus == 1 and job.gpus == 0
    assert job.grid_type == "k8s" and job.queue is None and job.settings == {}


def test_a_ce_submit_ad_with_route_settings() -> None:
    job = parse_submit_ad(ad(
        CERequirements='RequestCpus == 8 && RequestDisk == 1000000 && k8s_namespace == "pilots" && CondorCE == 1',
        NodeNumber="4", SMPGranularity="4", RequestMemory="16000", GPUNumber="1", BatchRuntime="259200",
        Queue='"gpu"', WholeNodes="false", x509userproxy='"proxy.pem"', TransferInput='"a.txt, /abs/b.txt"',
        In='"stdin.txt"'))
    assert job.cpus == 8  # RequestCpus from CERequirements wins over SMPGranularity
    assert job.disk_kb == 1000000 and job.memory_mb == 16000 and job.gpus == 1
    assert job.wall_time_s == 259200 and job.queue == "gpu" and job.whole_node is False
    assert job.settings == {"k8s_namespace": "pilots", "condorce": 1}
    assert job.setting("K8S_Namespace") == "pilots"
    assert job.proxy == "/home/pilot/proxy.pem"
    assert job.transfer_input == ("/home/pilot/a.txt", "/abs/b.txt")
    assert job.stdin == "/home/pilot/stdin.txt"


@pytest.mark.parametrize("attrs, cpus", [
    ({"SMPGranularity": "6", "NodeNumber": "2"}, 6),
    ({"HostSMPSize": "3", "NodeNumber": "2"}, 3),
    ({"NodeNumber": "2"}, 2),
    ({}, 1),
    ({"CERequirements": "RequestCpus == 5", "NodeNumber": "2"}, 5),
], ids=["smp-granularity", "host-smp-size", "node-number", "default", "ce-requirements"])
def test_cpus_precedence(attrs: dict, cpus: int) -> None:
    assert parse_submit_ad(ad(**attrs)).cpus == cpus


def test_v2_arguments_win_over_v1() -> None:
    job = parse_submit_ad(ad(Arguments='''"a 'b c' 'it''s'"''', Args='"ignored"'))
    assert job.arguments == ("a", "b c", "it's")


def test_v2_environment_wins_over_v1() -> None:
    job = parse_submit_ad(ad(Environment='''"A=1 'B=two words' C="''', Env='"X=1"'))
    assert job.environment == (("A", "1"), ("B", "two words"), ("C", ""))


def test_v1_environment_with_a_delimiter() -> None:
    job = parse_submit_ad(ad(Env='"A=1|B=2"', EnvDelim='"|"'))
    assert job.environment == (("A", "1"), ("B", "2"))


@pytest.mark.parametrize("text, args", [
    ("a b\tc", ["a", "b", "c"]),
    ("'one arg'", ["one arg"]),
    ("x'y z'w", ["xy zw"]),
    ("''", [""]),
    ("'it''s'", ["it's"]),
    ("  ", []),
], ids=["whitespace", "quoted", "mid-token-quote", "empty-quoted", "doubled-quote", "blank"])
def test_split_args_v2(text: str, args: list) -> None:
    assert split_args_v2(text) == args


def test_unbalanced_quote_is_an_error() -> None:
    with pytest.raises(ValueError):
        split_args_v2("'open")
    with pytest.raises(InvalidJob, match="Arguments"):
        parse_submit_ad(ad(Arguments='''"'open"'''))


def test_v1_helpers() -> None:
    assert split_args_v1(" a  'b c' ") == ["a", "'b", "c'"]
    assert split_env_v1("A=1;;B=x=y") == [("A", "1"), ("B", "x=y")]
    with pytest.raises(ValueError):
        split_env_v2("NOEQUALS")


@pytest.mark.parametrize("attrs, message", [
    ({"Cmd": None}, "no Cmd"),
    ({"Iwd": None}, "no Iwd"),
    ({"JobDirectory": None}, "no JobDirectory"),
    ({"Iwd": '"relative"'}, "Iwd"),
    ({"RequestMemory": '"lots"'}, "RequestMemory"),
    ({"RequestMemory": "0"}, "RequestMemory"),
    ({"BatchRuntime": '"1h"'}, "BatchRuntime"),
    ({"GPUNumber": "-1"}, "GPUNumber"),
    ({"Cmd": "42"}, "Cmd"),
    ({"CERequirements": 'RequestCpus == "eight"'}, "RequestCpus"),
    ({"CERequirements": "RequestDisk == -5"}, "RequestDisk"),
    ({"Environment": '"NOVALUE"'}, "environment"),
    ({"RequestMemory": "1/0"}, "RequestMemory"),
], ids=["no-cmd", "no-iwd", "no-jobdirectory", "relative-iwd", "memory-string", "memory-zero",
        "runtime-string", "negative-gpus", "cmd-not-string", "cpus-string", "disk-negative",
        "bad-environment", "memory-error"])
def test_bad_values_name_the_attribute(attrs: dict, message: str) -> None:
    with pytest.raises(InvalidJob, match=message):
        parse_submit_ad(ad(**attrs))


@pytest.mark.parametrize("text", ["", "garbage", "[ Cmd = ", "[ x = 1; y = ]"],
                         ids=["empty", "not-an-ad", "truncated", "missing-value"])
def test_unparsable_ads_are_invalid_jobs(text: str) -> None:
    with pytest.raises(InvalidJob):
        parse_submit_ad(text)


def test_ce_requirements_takes_only_name_equals_literal_conjuncts() -> None:
    assert ce_requirements('A == 1 && B == "x && y" && (C == true) && D == E && F > 2 && g == 2.5') == {
        "a": 1, "b": "x && y", "c": True, "g": 2.5}
    assert ce_requirements("A == 1 || B == 2") == {}


def test_status_ads() -> None:
    done = JobState(Phase.COMPLETED, exit_code=3, batch_id="p1", worker_node="n1")
    assert done.blahp_status == 4
    assert done.status_ad().startswith("[ ") and "ExitCode = 3" in done.status_ad()
    assert "ExitBySignal = false" in done.status_ad()
    killed = JobState(Phase.COMPLETED, exit_signal=9, exit_reason="OOMKilled")
    assert "ExitSignal = 9" in killed.status_ad() and "ExitBySignal = true" in killed.status_ad()
    assert 'ExitReason = "OOMKilled"' in killed.status_ad() and "ExitCode" not in killed.status_ad()
    held = JobState(Phase.HELD, hold_reason='image "x:1" cannot be pulled', hold_code=2, hold_subcode=7)
    assert held.blahp_status == 5 and 'HoldReason = "image \\"x:1\\" cannot be pulled"' in held.status_ad()
    assert "HoldReasonCode = 2" in held.status_ad() and "HoldReasonSubCode = 7" in held.status_ad()
    assert "\n" not in held.status_ad()


@pytest.mark.parametrize("phase, code", [
    (Phase.IDLE, 1), (Phase.RUNNING, 2), (Phase.REMOVED, 3), (Phase.COMPLETED, 4), (Phase.HELD, 5)])
def test_blahp_status_codes(phase: Phase, code: int) -> None:
    assert JobState(phase).blahp_status == code


@pytest.mark.parametrize("ad,message", [
    ("[ A = " + " + ".join(["1"] * 5000) + " ]", "operators outside strings"),
    ("[ A = " + "(" * 20000 + "1" + ")" * 20000 + " ]", "not a valid ClassAd"),
    ('[ Cmd = "' + "+" * 100000 + '"; Iwd = "/x" ]', "no JobDirectory"),
], ids=["many-operators", "deep-nesting", "operators-in-a-string-are-fine"])
def test_hostile_ads_are_refused_clearly(ad: str, message: str) -> None:
    with pytest.raises(InvalidJob, match=message):
        parse_submit_ad(ad)


@pytest.mark.parametrize("out, resolved", [
    ('"p.out"', "/home/pilot/p.out"),
    ('"logs/p.out"', "/home/pilot/logs/p.out"),
    ('"/home/pilot/p.out"', "/home/pilot/p.out"),
    ('"./a/../p.out"', "/home/pilot/p.out"),
    ('"/dev/null"', None),
    ('""', None),
], ids=["relative", "below", "absolute-inside", "dots-inside", "dev-null", "empty"])
def test_outputs_inside_the_job_directory_are_taken(out: str, resolved: str) -> None:
    job = parse_submit_ad(ad(Out=out, Err=out))
    assert (job.stdout, job.stderr) == (resolved, resolved)


@pytest.mark.parametrize("attr, value", [
    ("Out", '"/home/other/.ssh/authorized_keys"'), ("Err", '"../other/p.err"'), ("Out", '"/home/pilot"'),
    ("Out", '"/home/pilotx/p.out"'), ("Err", '"http://example.org/p.err"'),
], ids=["absolute-elsewhere", "dot-dot", "the-directory-itself", "prefix-sibling", "url"])
def test_outputs_outside_the_job_directory_are_refused(attr: str, value: str) -> None:
    with pytest.raises(InvalidJob, match=f"{attr} = .* is not inside the job's directory"):
        parse_submit_ad(ad(**{attr: value}))
