# SPDX-License-Identifier: MIT
"""Every public function of the C headers (include/cistern.h,
include/cistern/admin.h, include/cistern/remote.h) has a Python counterpart,
or is listed here as C-only with the reason."""
import os
import re

import cistern

INCLUDE = os.path.join(os.path.dirname(__file__), "..", "..", "include")
HEADERS = [
    os.path.join(INCLUDE, "cistern.h"),
    os.path.join(INCLUDE, "cistern", "admin.h"),
    os.path.join(INCLUDE, "cistern", "remote.h"),
]

# C function -> what does its work in Python (a dotted path under `cistern`).
COUNTERPARTS = {
    "cistern_name_valid": "name_valid",
    "cistern_create": "create",
    "cistern_config_problem": "config_problem",
    "cistern_attach": "attach",
    "cistern_attach_flags": "attach",  # any_owner=True, populate=True
    "cistern_detach": "Segment.detach",
    "cistern_unlink": "unlink",
    "cistern_reserve": "Segment.reserve",
    "cistern_commit": "Reservation.commit",
    "cistern_abort": "Reservation.abort",
    "cistern_put": "Segment.put",
    "cistern_put_batch": "Segment.put_batch",
    "cistern_close_reception": "Segment.close_reception",
    "cistern_producer_done": "Segment.producer_done",
    "cistern_acquire": "Segment.acquire",
    "cistern_release": "Sample.release",
    "cistern_unacquire": "Sample.unacquire",
    "cistern_get": "Segment.get",
    "cistern_acquire_pair": "Segment.acquire_pair",
    "cistern_release_pair": "Group.release",
    "cistern_get_pair": "Segment.get_pair",
    "cistern_get_windows": "Segment.get_windows",
    "cistern_acquire_batch": "Segment.acquire_batch",
    "cistern_release_batch": "Group.release",
    "cistern_get_batch": "Segment.get_batch",
    "cistern_read_problem": "Segment.get_batch",
    "cistern_gc_dump_to": "gc",  # dump_to=DIR  # its ValueError carries the sentence
    "cistern_config_get": "Segment.config",
    "cistern_stats_get": "Segment.stats",
    "cistern_strerror": "strerror",
    "cistern_policy_name": "policy_name",
    "cistern_policy_parse": "policy_number",
    "cistern_open_readonly": "open_readonly",
    "cistern_slot_class_name": "Occupancy",
    "cistern_occupancy_get": "Segment.occupancy",
    "cistern_procs_get": "Segment.procs",
    "cistern_list": "list_segments",
    "cistern_remove": "remove",
    "cistern_gc": "gc",
    "cistern_dump": "dump",
    "cistern_restore": "restore",
    "cistern_dump_verify": "verify_dump",
    "cistern_schema_parse": "Schema.parse",
    "cistern_schema_get": "Segment.schema",
    "cistern_schema_fields": "Segment.schema",
    "cistern_dtype_name": "Field",
    "cistern_remote_connect": "connect",
    "cistern_remote_put": "RemoteProducer.put",
    "cistern_remote_put_batch": "RemoteProducer.put_batch",
    "cistern_remote_put_prioritized": "RemoteProducer.put",  # priority=
    "cistern_remote_flush": "RemoteProducer.flush",
    "cistern_remote_producer_done": "RemoteProducer.producer_done",
    "cistern_remote_info_get": "RemoteProducer.info",
    "cistern_remote_schema_get": "RemoteProducer.schema",
    "cistern_remote_close": "RemoteProducer.close",
    "cistern_remote_keygen": "keygen",
    "cistern_put_prioritized": "Segment.put",  # priority=
    "cistern_get_prioritized": "Segment.get_prioritized",
    "cistern_get_prioritized_windows": "Segment.get_windows",  # prioritized=True
    "cistern_update_priorities": "Segment.update_priorities",
    "cistern_set_beta": "Segment.set_beta",
    "cistern_prio_info_get": "Segment.prio_info",
}

# C function -> why Python has no counterpart.
C_ONLY: dict[str, str] = {
    # The server is a command, not a library call in Python: `cistern serve`.
    "cistern_server_create": "the server runs as the `cistern serve` command",
    "cistern_server_run": "the server runs as the `cistern serve` command",
    "cistern_server_stop": "the server runs as the `cistern serve` command",
    "cistern_server_stats_get": "the server runs as the `cistern serve` command",
    "cistern_server_stats_read": "the server runs as the `cistern serve` command",
    "cistern_server_close": "the server runs as the `cistern serve` command",
    # Monitoring reads it: `cistern exporter` serves it as cistern_rate_limit_read_budget.
    "cistern_rate_get": "the rate limiter's budget is for monitoring: `cistern exporter`",
    # A server counts the remote producers it lost; Python producers have their own handle.
    "cistern_producer_died": "the server (`cistern serve`) counts the remote producers it lost",
    # Windows are copied out: get_windows() acquires, copies and releases in one call.
    "cistern_acquire_window": "Segment.get_windows() copies windows out in one call",
    "cistern_release_window": "Segment.get_windows() copies windows out in one call",
    # Cold files left by a segment that is gone: an administrator's sweep of a directory.
    "cistern_gc_cold": "cold files whose segment is gone are collected by `cistern gc --cold-dir`",
}


def _header_functions():
    text = "".join(open(h).read() for h in HEADERS)
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)  # comments may name functions
    return set(re.findall(r"\bCISTERN_API\b[^;(]*?\b(cistern_\w+)\s*\(", text))


def _resolve(path):
    obj = cistern
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def test_the_header_parse_finds_the_api():
    funcs = _header_functions()
    assert {"cistern_create", "cistern_get", "cistern_dump_verify", "cistern_remote_put"} <= funcs
    assert len(funcs) >= 38


def test_every_public_c_function_has_a_python_counterpart_or_a_reason():
    funcs = _header_functions()
    missing = sorted(funcs - set(COUNTERPARTS) - set(C_ONLY))
    assert not missing, f"no Python counterpart and not listed as C-only: {missing}"
    both = sorted(set(COUNTERPARTS) & set(C_ONLY))
    assert not both, f"listed both ways: {both}"
    stale = sorted((set(COUNTERPARTS) | set(C_ONLY)) - funcs)
    assert not stale, f"listed but not in include/cistern.h: {stale}"
    assert all(reason.strip() for reason in C_ONLY.values())


def test_every_counterpart_exists_and_is_documented():
    for c_name, path in COUNTERPARTS.items():
        obj = _resolve(path)
        assert (obj.__doc__ or "").strip(), f"{path} (for {c_name}) has no docstring"
