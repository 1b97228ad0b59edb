"""The submit ad the gridmanager builds from a routed job (``INFNBatchJob::buildSubmitAd``), predicted
offline, and what podgahp reads from it."""

from __future__ import annotations

import re
from typing import List, Optional, Tuple

import classad2

from gahp.core.job import PilotJob, parse_submit_ad


# --------------------------------------------------------------------------------------------
# The submit ad the gridmanager builds (INFNBatchJob::buildSubmitAd)

#: Job attributes the gridmanager evaluates in the routed job and copies as literals.
COPIED_ATTRIBUTES: Tuple[str, ...] = (
    "Args", "Arguments", "Env", "EnvDelim", "Environment", "In", "Out", "Err", "TransferInput",
    "TransferOutput", "TransferOutputRemaps", "Iwd", "GridResource", "RequestMemory", "NodeNumber",
    "HostNumber", "SMPGranularity", "WholeNodes", "HostSMPSize", "BatchExtraSubmitArgs", "StageCmd",
    "BatchProject", "BatchRuntime", "GPUNumber", "GPUMode", "GPUModel", "MICNumber",
)

_ENV_ATTRIBUTES = {"env", "envdelim", "environment"}
_ARG_ATTRIBUTES = {"args", "arguments"}
LIST_SEPARATORS = re.compile(r"[,\s]+")


def _evaluate(ad: classad2.ClassAd, name: str) -> object:
    """``name`` evaluated in ``ad`` (``classad2.Value.Undefined`` when absent)."""
    if name not in ad:
        return classad2.Value.Undefined
    return ad.eval(name)


def ad_value(ad: classad2.ClassAd, name: str) -> object:
    """``name`` evaluated in ``ad``; None when absent, undefined or an error.

    (``classad2.Value`` is an int enum, so it must never reach an ``isinstance(x, int)`` test.)
    """
    value = _evaluate(ad, name)
    return None if isinstance(value, classad2.Value) else value


def _literal_text(value: object) -> Optional[str]:
    """The ClassAd literal for an evaluated value, or None when the value is not a scalar."""
    if isinstance(value, classad2.Value):
        return "error" if value == classad2.Value.Error else "undefined"
    if isinstance(value, (bool, int, float, str)):
        holder = classad2.ClassAd()
        holder["v"] = value
        return str(holder.lookup("v"))
    return None


def grid_type(grid_resource: str) -> Tuple[str, List[str]]:
    """The batch type of a ``GridResource`` and any further tokens (which mean remote mode)."""
    tokens = grid_resource.split(" ")
    if tokens and tokens[0].lower() == "batch":
        tokens = tokens[1:]
    if not tokens or not tokens[0]:
        return "", []
    return tokens[0].lower(), tokens[1:]


def predict_submit_ad(routed: classad2.ClassAd, sandbox_id: str) -> classad2.ClassAd:
    """The ad ``BLAH_JOB_SUBMIT`` would carry for ``routed`` (blahp-protocol.md §4.1, §4.3)."""
    submit = classad2.ClassAd()
    _copy_literals(routed, submit)
    _copy_ce_requirements(routed, submit)
    _copy_batch_requests(routed, submit)
    _copy_paths(routed, submit)
    submit["JobDirectory"] = "home_bl_" + sandbox_id
    _set_grid_type(routed, submit)
    _apply_remote_attributes(routed, submit)
    return submit


def _copy_literals(routed: classad2.ClassAd, submit: classad2.ClassAd) -> None:
    """Each of :data:`COPIED_ATTRIBUTES` the routed job has, evaluated there, as a literal (none
    that is not a scalar)."""
    for name in COPIED_ATTRIBUTES:
        if name in routed:
            text = _literal_text(routed.eval(name))
            if text is not None:
                submit[name] = classad2.ExprTree(text)


def _copy_batch_requests(routed: classad2.ClassAd, submit: classad2.ClassAd) -> None:
    """What the gridmanager takes under another name: ``RemoteIwd`` as ``Iwd``, ``BatchQueue`` as
    ``Queue``, a positive ``RequestGPUs`` as ``GPUNumber``."""
    remote_iwd = ad_value(routed, "RemoteIwd")
    if isinstance(remote_iwd, str) and remote_iwd:
        submit["Iwd"] = remote_iwd
    queue = ad_value(routed, "BatchQueue")
    if isinstance(queue, str) and queue:
        submit["Queue"] = queue
    gpus = ad_value(routed, "RequestGPUs")
    if isinstance(gpus, (int, float)) and not isinstance(gpus, bool) and int(gpus) > 0:
        submit["GPUNumber"] = int(gpus)


def _copy_paths(routed: classad2.ClassAd, submit: classad2.ClassAd) -> None:
    """``Cmd`` and ``x509userproxy`` made absolute against the submit ad's ``Iwd``."""
    iwd = ad_value(submit, "Iwd")
    cmd = ad_value(routed, "Cmd")
    if isinstance(cmd, str):
        submit["Cmd"] = cmd if cmd.startswith("/") or not isinstance(iwd, str) else f"{iwd}/{cmd}"
    proxy = ad_value(routed, "x509userproxy")
    if isinstance(proxy, str):
        submit["x509userproxy"] = proxy if proxy.startswith("/") else f"{iwd if isinstance(iwd, str) else ''}/{proxy}"


def _set_grid_type(routed: classad2.ClassAd, submit: classad2.ClassAd) -> None:
    """``gridtype``: the batch type of the routed job's ``GridResource`` (none for ``blah``)."""
    resource = ad_value(routed, "GridResource")
    batch = grid_type(resource)[0] if isinstance(resource, str) else ""
    if batch and batch != "blah":
        submit["gridtype"] = batch


def _copy_ce_requirements(routed: classad2.ClassAd, submit: classad2.ClassAd) -> None:
    """CERequirements as the gridmanager sends it: each named attribute's value, as ``name == value``."""
    if "CERequirements" not in routed:
        return
    cereq = routed.eval("CERequirements")
    conjuncts: List[str] = []
    if isinstance(cereq, str):
        pairs = [(n, _evaluate(routed, n)) for n in LIST_SEPARATORS.split(cereq) if n]
    elif isinstance(cereq, classad2.ClassAd):
        pairs = [(n, cereq.eval(n)) for n in cereq.keys()]
    else:
        pairs = []
        if not isinstance(cereq, classad2.Value) or cereq != classad2.Value.Undefined:
            submit["CERequirements"] = routed.lookup("CERequirements")
    for name, value in pairs:
        text = _literal_text(value)
        if text is not None:
            conjuncts.append(f"{name} == {text}")
    if conjuncts:
        submit["CERequirements"] = classad2.ExprTree(" && ".join(conjuncts))


def _apply_remote_attributes(routed: classad2.ClassAd, submit: classad2.ClassAd) -> None:
    """``remote_<name>`` attributes replace ``<name>`` (one of the environment or argument forms
    replaces all of them)."""
    cleared_env = cleared_args = False
    for name in list(routed.keys()):
        if len(name) <= 7 or name[:7].lower() != "remote_":
            continue
        target = name[7:]
        if target.lower() in _ENV_ATTRIBUTES and not cleared_env:
            cleared_env = True
            delete_attributes(submit, "Env", "EnvDelim", "Environment")
        if target.lower() in _ARG_ATTRIBUTES and not cleared_args:
            cleared_args = True
            delete_attributes(submit, "Args", "Arguments")
        delete_attributes(submit, target)
        submit[target] = routed.lookup(name)


def delete_attributes(ad: classad2.ClassAd, *names: str) -> None:
    for name in names:
        if name in ad:
            del ad[name]


def gahp_view(routed: classad2.ClassAd, sandbox_id: str) -> Tuple[str, PilotJob]:
    """The predicted submit ad (one line, as sent) and the :class:`PilotJob` podgahp reads from it."""
    text = repr(predict_submit_ad(routed, sandbox_id))
    return text, parse_submit_ad(text)


