"""Converting old-syntax routes: each entry rewritten without loss, the rest of the file kept.

HTCondor reads the values in the product (``read_old_routes``); here :func:`old_routes` stands in
for it on files whose knobs need no expansion: the block's lines without comments, as HTCondor
keeps them."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Dict, List, Optional

import classad2
import pytest

from gahp.routes import RoutesError
from gahp.routes.config_text import statements
from gahp.routes.convert import OldRoutes, convert_routes, inline, mark_checks
from gahp.routes.macros import keep_undefined

REPO = Path(__file__).resolve().parents[3]


def value(lines: List[str], knob: str) -> Optional[str]:
    found = None
    for statement in statements(lines):
        if statement.knob != knob:
            continue
        if statement.kind == "block":
            body = lines[statement.first + 1:statement.last]
            found = "\n".join(line for line in body if not line.strip().startswith("#"))
        else:
            found = statement.rhs
    return found


def old_routes(text: str) -> OldRoutes:
    lines = text.splitlines()
    return OldRoutes(
        path="/etc/condor-ce/config.d/50-routes.conf", lines=tuple(lines), statements=tuple(statements(lines)),
        entries=value(lines, "JOB_ROUTER_ENTRIES") or "", defaults=value(lines, "JOB_ROUTER_DEFAULTS") or "",
        merge_defaults=(value(lines, "MERGE_JOB_ROUTER_DEFAULT_ADS") or "").lower() == "true",
        route_names=value(lines, "JOB_ROUTER_ROUTE_NAMES"),
        names_in_file=value(lines, "JOB_ROUTER_ROUTE_NAMES") is not None)


def blocks(text: str) -> Dict[str, List[str]]:
    """Route name -> statement lines of every JOB_ROUTER_ROUTE_<name> @=jrt block."""
    found: Dict[str, List[str]] = {}
    for match in re.finditer(r"^JOB_ROUTER_ROUTE_(\w+) @=jrt\n(.*?)^@jrt$", text, re.M | re.S):
        found[match.group(1)] = [line.strip() for line in match.group(2).splitlines() if line.strip()
                                 and not line.strip().startswith("#")]
    return found


ENTRIES = """\
# site routes
JOB_ROUTER_USE_DEPRECATED_ROUTER_ENTRIES = True
MERGE_JOB_ROUTER_DEFAULT_ADS = True
JOB_ROUTER_DEFAULTS = [ MaxIdleJobs = 7; set_Foo = 1; eval_set_Bar = Foo + 1 ] [ delete_C = true ]
JOB_ROUTER_ENTRIES @=jre
  # the Kubernetes route
  [ name = "K8s"; GridResource = "batch k8s"; TargetUniverse = 9;
    Requirements = target.queue =?= "target.x" && TARGET.RequestGPUs > 0 && MY.Limit > 5;
    Limit = 10;
    set_Foo = 2; copy_E = "F"; eval_set_Baz = RequestCpus * Limit; eval_set_Zip = MY.Absent; MaxJobs = 10 ]
  # Lancium, with a name that is not a valid attribute name
  [ name = "Other-Site"; GridResource = "batch lancium"; Requirements = true ]
@jre
OTHER_KNOB = kept
"""


def test_each_entry_becomes_a_route_and_the_rest_stays() -> None:
    conversion = convert_routes(old_routes(ENTRIES))
    out = conversion.text
    assert "JOB_ROUTER_USE_DEPRECATED_ROUTER_ENTRIES = True" not in out and "[ name" not in out
    assert "OTHER_KNOB = kept" in out and "# site routes" in out
    assert blocks(out) == {
        "K8s": [
            "TargetUniverse = 9",
            'GridResource = "batch k8s"',
            "MaxJobs = 10",
            "MaxIdleJobs = 7",
            "Limit = 10",  # kept as a macro, as HTCondor's converter keeps it
            'REQUIREMENTS queue is "target.x" && RequestGPUs > 0',  # MY.Limit > 5: the route's own, true
            "COPY E F",
            "DELETE C",
            "SET Foo 2",  # the entry wins over the defaults
            "EVALSET Bar Foo + 1",
            "EVALSET Baz 10 * RequestCpus",  # the route's own Limit inlined
            "EVALSET Zip undefined",  # MY.Absent was the route's own, undefined attribute
        ],
        "Other_Site": ['GridResource = "batch lancium"', "MaxIdleJobs = 7", "REQUIREMENTS true",
                       "DELETE C", "SET Foo 1", "EVALSET Bar Foo + 1"],
    }
    # Comments inside the entries go with the route they were written for.
    assert out.index("# the Kubernetes route") < out.index("JOB_ROUTER_ROUTE_K8s @=jrt")
    assert out.index("JOB_ROUTER_ROUTE_K8s @=jrt") < out.index("# Lancium, with a name") \
        < out.index("JOB_ROUTER_ROUTE_Other_Site @=jrt")
    assert any("was named 'Other-Site'" in n for n in conversion.notes)
    assert any("Limit" in n and "kept as macros" in n for n in conversion.notes)


def test_listed_first_without_an_empty_name_when_the_file_names_no_routes() -> None:
    out = convert_routes(old_routes(ENTRIES)).text
    assert ("if defined JOB_ROUTER_ROUTE_NAMES\n  JOB_ROUTER_ROUTE_NAMES = K8s Other_Site $(JOB_ROUTER_ROUTE_NAMES)\n"
            "else\n  JOB_ROUTER_ROUTE_NAMES = K8s Other_Site\nendif") in out


def test_the_files_own_route_names_stay_and_what_they_leave_out_is_said() -> None:
    text = ENTRIES + "JOB_ROUTER_ROUTE_NAMES = K8s\n"
    conversion = convert_routes(old_routes(text))
    assert "JOB_ROUTER_ROUTE_NAMES = K8s\n" in conversion.text
    assert "if defined JOB_ROUTER_ROUTE_NAMES" not in conversion.text
    assert [n for n in conversion.notes if "not in the file's JOB_ROUTER_ROUTE_NAMES" in n] == [
        "route Other_Site is not in the file's JOB_ROUTER_ROUTE_NAMES, so the JobRouter did not use it before and "
        "does not now; add it to the list to use it"]


CE_DEFAULTS = """\
JOB_ROUTER_ENTRIES @=jre
[
  name = "Condor_Pool";
  GridResource = "batch k8s";
  set_default_maxMemory = 1000;
  set_default_queue = "osg_queue";
  eval_set_default_xcount = Cores * 2;
  Cores = 4;
  default_maxWallTime = 60;
  set_default_pilot_job_env = strcat("VO=", toLower(JOB_VO));
  default_CERequirements = "RequestCpus";
  set_default_CERequirements = "RequestCpus,RequestDisk";
]
@jre
"""


def test_ce_defaults_become_the_macros_the_ce_reads() -> None:
    conversion = convert_routes(old_routes(CE_DEFAULTS))
    assert blocks(conversion.text)["Condor_Pool"] == [
        'GridResource = "batch k8s"',
        "default_xcount = 8",  # evaluated with the route's own Cores, as the old syntax did
        "default_maxMemory = 1000",
        "default_queue = osg_queue",  # read inside a string by the CE: the bare text
        "default_maxWallTime = 60",
        'default_pilot_job_env = (strcat("VO=",toLower(JOB_VO)))',
        "Cores = 4",
        'SET default_CERequirements "RequestCpus"',
        'SET default_CERequirements "RequestCpus,RequestDisk"',
    ]
    said = " ".join(conversion.notes)
    assert "HTCondor's own converter writes SET default_maxMemory" in said
    assert "default_CERequirements is read from the job" in said


def test_an_entry_that_is_not_a_classad_is_refused_at_its_line() -> None:
    with pytest.raises(RoutesError, match=re.escape(":2: this entry of JOB_ROUTER_ENTRIES is not a ClassAd")):
        convert_routes(old_routes('JOB_ROUTER_ENTRIES @=jre\n[ name = "A"; Requirements = \n@jre\n'))


@pytest.mark.parametrize("entry, check", [
    ('set_default_queue = strcat("q", Owner)', 'default_queue = strcat("q",Owner) is an expression'),
    ("copy_X = 5", "copy_X must name the attribute to copy to, as a string: not converted"),
], ids=["queue-expression", "copy-target"])
def test_what_cannot_be_said_is_converted_as_closely_as_it_can_after_a_check(entry: str, check: str) -> None:
    text = f'JOB_ROUTER_ENTRIES @=jre\n[ name = "A"; set_Foo = 1; {entry} ]\n[ name = "B"; set_Bar = 2 ]\n@jre\n'
    conversion = convert_routes(old_routes(text))
    assert len(conversion.checks) == 1 and conversion.checks[0].startswith(f"route A: {check}")
    assert blocks(conversion.text) == {"A": ["SET Foo 1"], "B": ["SET Bar 2"]}
    lines = conversion.text.splitlines()
    assert lines[lines.index("JOB_ROUTER_ROUTE_A @=jrt") - 1].startswith(f"# podgahp: CHECK {check}")


def test_an_entry_of_a_name_already_read_replaces_it_in_its_place_as_the_router_did() -> None:
    text = ('JOB_ROUTER_ENTRIES @=jre\n[ name = "A"; set_X = 2 ]\n[ name = "C"; set_X = 3 ]\n'
            '[ name = "B"; set_X = 5; OverrideRoutingEntry = false ]\n@jre\n')
    old = replace(old_routes(text), file_entries='[ name = "B"; set_X = 4 ] [ name = "A"; set_X = 1 ]',
                  entries_file="/etc/condor-ce/entries")
    conversion = convert_routes(old)
    assert [r.name for r in conversion.routes] == ["B", "A", "C"]
    assert blocks(conversion.text) == {"B": ["SET X 4"],
                                       "A": ["SET X 2"], "C": ["SET X 3"]}
    said = " ".join(conversion.notes)
    assert "entry 1 of JOB_ROUTER_ENTRIES is named 'A' like entry 2 of JOB_ROUTER_ENTRIES_FILE: it replaces" in said
    assert "entry 3 of JOB_ROUTER_ENTRIES is named 'B' like an earlier entry and says OverrideRoutingEntry = false" \
        in said


CE_ROUTES = """\
JOB_ROUTER_ENTRIES @=jre
[ name = "Mem"; GridResource = "batch k8s"; set_RequestMemory = 16000 ]
[ name = "Cpus"; GridResource = "batch k8s"; eval_set_RequestCpus = 8; set_default_CERequirements = "RequestCpus" ]
[ name = "CpusUnread"; GridResource = "batch k8s"; eval_set_RequestCpus = 8 ]
[ name = "PoolCpus"; TargetUniverse = 5; set_RequestCpus = 8 ]
[ name = "Wall"; GridResource = "batch k8s"; eval_set_BatchRuntime = 3600 ]
[ name = "WallSet"; GridResource = "batch k8s"; set_BatchRuntime = 3600 ]
[ name = "Env"; GridResource = "batch k8s"; copy_environment = "site_env"; copy_BatchRuntime = "orig_BatchRuntime" ]
[ name = "Queue"; GridResource = "batch k8s"; set_BatchQueue = "q" ]
[ name = "RemoteQueue"; GridResource = "batch k8s"; set_BatchQueue = "q"; set_remote_queue = "q" ]
@jre
"""


def test_for_a_ce_a_route_gets_what_the_ces_own_defaults_did_for_it() -> None:
    added = {name: [s for s in statements if s.split()[0] in ("EVALSET", "COPY", "RENAME", "DELETE", "SET")
                    and s not in plain]
             for (name, statements), plain in zip(blocks(convert_routes(old_routes(CE_ROUTES)).text).items(),
                                                   blocks(convert_routes(old_routes(CE_ROUTES), ce=False)
                                                          .text).values())}
    assert added == {
        "Mem": ["EVALSET maxMemory RequestMemory"],
        "Cpus": ["EVALSET xcount RequestCpus"],
        "CpusUnread": [],  # the batch system reads remote_SMPGranularity, the same either way
        "PoolCpus": ["EVALSET xcount RequestCpus"],
        "Wall": ["COPY BatchRuntime orig_BatchRuntime", "RENAME maxWallTime orig_maxWallTime"],
        "WallSet": ["COPY orig_BatchRuntime BatchRuntime"],
        "Env": ["DELETE orig_environment"],  # its copy of BatchRuntime is the CE's own
        "Queue": ['EVALSET remote_queue batch_queue ?: (queue ?: "$(default_queue)")'],
        "RemoteQueue": [],
    }


def test_defaults_of_several_ads_are_merged_only_when_told() -> None:
    text = 'JOB_ROUTER_DEFAULTS = [ set_A = 1 ] [ set_B = 2 ]\nJOB_ROUTER_ENTRIES = [ name = "R" ]\n'
    assert blocks(convert_routes(old_routes(text)).text)["R"] == ["SET A 1"]
    merged = old_routes("MERGE_JOB_ROUTER_DEFAULT_ADS = True\n" + text)
    assert blocks(convert_routes(merged).text)["R"] == ["SET A 1", "SET B 2"]


def test_inline_keeps_what_is_the_jobs() -> None:
    route = classad2.parseOne('[ Limit = 3 ]')
    assert inline(route, classad2.ExprTree("TARGET.RequestCpus > Limit && MY.Limit == 3"), untarget=True) == \
        "RequestCpus > 3"
    assert inline(route, classad2.ExprTree('strcat("target.x", TARGET.Owner)'), untarget=False) == \
        'strcat("target.x",TARGET.Owner)'


def test_the_shipped_entries_convert_to_the_shipped_routes() -> None:
    """The old-syntax file also sets remote_queue (HTCondor-CE 23.0 overrode BatchQueue with its
    own remote_queue); apart from that its conversion is the shipped new-syntax file."""
    converted = blocks(convert_routes(old_routes((REPO / "routes/50-podgahp-routes.entries.conf").read_text())).text)
    shipped = blocks((REPO / "routes/50-podgahp-routes.conf").read_text())
    assert list(converted) == list(shipped) == ["K8s_Opportunistic", "Lancium", "K8s_Gpu", "K8s_Cpu"]
    for name in shipped:
        ours = [s for s in converted[name] if not s.startswith("EVALSET remote_queue ")]
        assert normalized(ours) == normalized(shipped[name]), name


def normalized(lines: List[str]) -> List[str]:
    """Statements with REQUIREMENTS unparsed by classad2 (``=?=`` and ``is`` are the same)."""
    out = []
    for line in lines:
        if line.startswith("REQUIREMENTS "):
            line = "REQUIREMENTS " + str(classad2.ExprTree(line[len("REQUIREMENTS "):]))
        out.append(line)
    return sorted(out)


def test_every_shipped_route_sends_cpus_and_disk_both_ways() -> None:
    for name, statements in blocks((REPO / "routes" / "50-podgahp-routes.conf").read_text()).items():
        lists = {line.split()[1]: line.split(None, 2)[2] for line in statements
                 if line.split()[:2] in (["SET", "CERequirements"], ["SET", "default_CERequirements"])}
        assert lists["CERequirements"] == lists["default_CERequirements"], name
        names = lists["CERequirements"].strip('"').split(",")
        assert names[:2] == ["RequestCpus", "RequestDisk"], name
        for extra in names[2:]:  # every further name is set by the route itself
            assert any(line.startswith(f"SET {extra} ") for line in statements), (name, extra)


def test_the_entries_before_one_that_is_not_a_classad_are_converted_as_the_router_used_them() -> None:
    text = ('JOB_ROUTER_ENTRIES @=jre\n[ name = "A"; set_Note = "a ] in a string"; /* ] */ set_X = 1 ]\n'
            '[ name = "B"; set_Q = "unclosed; ]\n[ name = "C" ]\n@jre\n')
    conversion = convert_routes(old_routes(text))
    assert [r.name for r in conversion.routes] == ["A"]
    assert blocks(conversion.text) == {"A": ['SET Note "a ] in a string"', "SET X 1"]}
    assert conversion.checks == ("/etc/condor-ce/config.d/50-routes.conf:3: this entry of JOB_ROUTER_ENTRIES is not a "
                                 "ClassAd (an unclosed string or bracket, a missing ';'): the JobRouter ignored it and "
                                 "what follows it, and so does the conversion; fix it and convert again",)
    assert "# podgahp: CHECK /etc/condor-ce/config.d/50-routes.conf:3: this entry" in conversion.text


def test_a_macro_the_file_does_not_define_in_requirements_is_a_check() -> None:
    kept = keep_undefined(['[ name = "A"; Requirements = target.RequestCpus <= $(SITE_MAX); set_X = $(SITE_X) ]'],
                          lambda name: None)
    text = 'JOB_ROUTER_ENTRIES @=jre\n[ name = "A"; Requirements = target.RequestCpus <= podgahp_macro_0_; ' \
           'set_X = podgahp_macro_1_ ]\n@jre\n'
    conversion = convert_routes(replace(old_routes(text), macros=kept))
    assert blocks(conversion.text) == {"A": ["REQUIREMENTS RequestCpus <= $(SITE_MAX)", "SET X $(SITE_X)"]}
    assert conversion.checks == ("route A: REQUIREMENTS refers to $(SITE_MAX), which this file does not define, and "
                                 "the JobRouter expands no macro in a route's REQUIREMENTS (it drops the route as not "
                                 "valid): write the value in",)
    assert "the routes need from the rest of the configuration: SITE_MAX, SITE_X" in " ".join(conversion.notes)


def test_what_the_proof_finds_is_marked_before_the_route() -> None:
    conversion = convert_routes(old_routes('JOB_ROUTER_ENTRIES @=jre\n[ name = "A" ]\n[ name = "B" ]\n@jre\n'))
    marked = mark_checks(conversion, {"B": ["pilot wholenode: cores 8 under the old route, 16 under the converted"]})
    lines = marked.text.splitlines()
    assert lines[lines.index("JOB_ROUTER_ROUTE_B @=jrt") - 1] == \
        "# podgahp: CHECK pilot wholenode: cores 8 under the old route, 16 under the converted"
    assert marked.checks == ("route B: pilot wholenode: cores 8 under the old route, 16 under the converted",)
    assert mark_checks(marked, {"B": ["pilot wholenode: cores 8 under the old route, 16 under the converted"]}) \
        .text == marked.text
