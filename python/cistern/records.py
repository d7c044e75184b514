# SPDX-License-Identifier: MIT
"""Typed, read-only records of what the extension reports as dicts: a
segment's parameters, counts, occupancy, processes, listings, gc reports,
dumps and remote connections. Each field is named once, here;
python/tests/test_typing.py checks them against the extension."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple, TypeVar

from ._common import _cistern
from .errors import strerror
from .constants import SLOT_CLASSES

__all__ = [
    "Meta", "Config", "Stats", "Occupancy", "ProcInfo", "SegmentInfo", "GcReport", "DumpInfo",
    "Inspection", "RemoteInfo", "PrioInfo", "PrioritizedBatch",
]


class Meta(NamedTuple):
    """The metadata of a sample: its id (given by the segment at commit) and the
    producer's simulation id and time step."""

    sample_id: int
    sim_id: int
    time_step: int


class PrioritizedBatch(NamedTuple):
    """What Segment.get_prioritized() returns: the samples (an array of shape
    (k, ...) or a dict of them by field), their ids for update_priorities()
    ((k,) uint64) and their importance weights ((k,) float32, in (0, 1]).
    It unpacks as samples, ids, weights."""

    samples: Any
    ids: Any
    weights: Any


_R = TypeVar("_R", bound="_Record")


class _Record(Mapping[str, Any]):
    """A read-only record that also reads as a mapping of its fields
    (rec["puts"] is rec.puts), for code written against the dicts it replaces."""

    __slots__ = ()

    @classmethod
    def _names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    def __getitem__(self, key: str) -> Any:
        if key not in self._names():
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    @classmethod
    def _from(cls: type[_R], d: Mapping[str, Any]) -> _R:
        """The record of the extension's dict d: lists become tuples; keys this
        record does not know are left out (python/tests/test_typing.py)."""
        return cls(**{k: tuple(v) if isinstance(v, list) else v
                      for k, v in d.items() if k in cls._names()})


@dataclasses.dataclass(frozen=True, repr=True)
class Config(_Record):
    """A segment's parameters as created, defaults filled in, named as create()'s
    arguments (struct cistern_config)."""

    policy: str
    slots: int
    slot_size: int
    mode: int
    watermark: int
    pseudo_epochs: int
    sweep_size: int
    time_steps: int
    batch_size: int
    #: Reads after which a sample leaves (the reservoir kinds), 0 = never.
    max_times_sampled: int
    seed: int
    max_procs: int
    expected_producers: int
    flags: int
    lossy: bool
    single_producer: bool
    single_reader: bool
    dead_producer_done: bool
    reads_per_put: float
    rate_slack: float
    #: The prioritized policy's exponents and offset (0 for the other
    #: policies): a draw picks sample i with probability
    #: (priority_i + epsilon)^alpha / sum_j (priority_j + epsilon)^alpha and
    #: weighs it (N P(i))^-beta / max_j (N P(j))^-beta. beta is the one given
    #: at creation; PrioInfo.beta is the one in force.
    alpha: float
    beta: float
    epsilon: float
    #: The schema's canonical text, or None for a segment without one (and in
    #: list_segments(), which does not read schemas: see Segment.schema).
    schema: str | None


@dataclasses.dataclass(frozen=True)
class PrioInfo(_Record):
    """A prioritized segment's parameters and totals (struct cistern_prio_info;
    docs/protocol/priorities.md): beta as it is now, total the sum of
    p^alpha over the samples held (p = priority + epsilon), least the
    smallest p^alpha held (0 if none), max_priority the largest priority seen
    (what a put without one gets), updates the priorities applied, stale_updates
    the ids ignored because their sample had left, rebuilds the tree rebuilds
    after a process died holding its lock."""

    alpha: float
    beta: float
    epsilon: float
    total: float
    least: float
    max_priority: float
    updates: int
    stale_updates: int
    rebuilds: int


@dataclasses.dataclass(frozen=True)
class Stats(_Record):
    """A segment's statistics (struct cistern_stats; docs/POLICIES.md says what
    each counts). seen_hist buckets the seen counts of samples that left the
    buffer: 0, 1, 2, 3, 4, 5-8, 9-16, >16."""

    population: int
    puts: int
    gets: int
    evictions: int
    evicted_unseen: int
    redeliveries: int
    reclaimed: int
    producer_waits: int
    producer_wait_ns: int
    reader_waits: int
    reader_wait_ns: int
    seen_hist: tuple[int, ...]
    unpaired: int
    procs_attached: int
    reception_closed: bool
    producers_expected: int
    producers_done: int
    producers_died: int
    #: The cold tier (create(cold_slots=...)), all 0 without one: its slots,
    #: the samples held there (part of population), its file's bytes, and
    #: the samples spilled to it, read back from it and evicted there.
    cold_slots: int = 0
    cold_population: int = 0
    cold_disk_bytes: int = 0
    cold_spilled: int = 0
    cold_reads: int = 0
    cold_evictions: int = 0
    #: The cold file's I/O: bytes written to it and read from it, and the
    #: time processes spent waiting for those writes and reads to complete.
    cold_bytes_written: int = 0
    cold_bytes_read: int = 0
    cold_write_wait_ns: int = 0
    cold_read_wait_ns: int = 0
    #: A FIFO's staging runs, in the segment: their bytes, the groups of
    #: cold samples staged there and those being written to disk, and the
    #: times a put waited for a group's write. All 0 for other policies.
    cold_stage_bytes: int = 0
    cold_groups_staged: int = 0
    cold_groups_writing: int = 0
    cold_write_waits: int = 0


@dataclasses.dataclass(frozen=True)
class Occupancy(_Record):
    """Slots counted by class, in one pass over the slot words (a near-instant
    picture under load, not an atomic one) (struct cistern_occupancy).

    slots maps each name of SLOT_CLASSES to its count; held counts the samples
    held now and held_bytes their payload; held_seen_hist buckets their seen
    counts as Stats.seen_hist does."""

    slots: Mapping[str, int]
    pinned: int
    held: int
    held_bytes: int
    held_seen_hist: tuple[int, ...]

    @classmethod
    def _from(cls, d: Mapping[str, Any]) -> Occupancy:
        return cls(slots=dict(zip(SLOT_CLASSES, d["slots"])), pinned=d["pinned"],
                   held=d["held"], held_bytes=d["held_bytes"],
                   held_seen_hist=tuple(d["held_seen_hist"]))


@dataclasses.dataclass(frozen=True)
class ProcInfo(_Record):
    """One entry in use of a segment's attachment table (struct cistern_proc_info).

    alive is False for a process that died without detaching; waiting is 0, 1
    (waiting for data) or 2 (waiting for room); role has the bits
    producer (1) and reader (2)."""

    index: int
    pid: int
    uid: int
    role: int
    alive: bool
    waiting: int
    attached_ns: int
    puts: int
    gets: int
    comm: str

    @property
    def producer(self) -> bool:
        """Whether the process has put or reserved through this attachment."""
        return bool(self.role & _cistern.PROC_PRODUCER)

    @property
    def reader(self) -> bool:
        """Whether the process has read through this attachment."""
        return bool(self.role & _cistern.PROC_READER)


@dataclasses.dataclass(frozen=True)
class SegmentInfo(_Record):
    """One segment as list_segments() sees it (struct cistern_segment_info).

    status is 0 if its header checks, else a negative errno saying why not
    (problem gives it in words); config and population mean something only with
    status 0."""

    name: str
    status: int
    config: Config | None
    file_size: int
    created_ns: int
    uid: int
    mode: int
    population: int
    procs_live: int
    procs_dead: int
    closed: bool

    @property
    def problem(self) -> str | None:
        """Why the segment cannot be read (strerror(status)), or None."""
        return strerror(self.status) if self.status else None

    @classmethod
    def _from(cls, d: Mapping[str, Any]) -> SegmentInfo:
        cfg = d["config"]
        return cls(**{k: v for k, v in d.items() if k in cls._names() and k != "config"},
                   config=Config._from(cfg) if cfg is not None else None)


@dataclasses.dataclass(frozen=True)
class GcReport(_Record):
    """What gc() found and did for one segment (struct cistern_gc_report).

    removed is 0 if the segment was kept, else why it was removed (or would be,
    in a dry run): 1 every attachment is dead and one at least died without
    detaching, and it held no unread sample; 2 it never finished creation; 3 an
    unfinished restore; 4 stale with unread samples, dumped then removed; 5
    stale with unread samples, discarded. unread counts the samples readers
    would still get; kept is True for a stale segment kept for them."""

    dead_procs: int
    reservations: int
    redelivered: int
    pins: int
    live_procs: int
    removed: int
    unread: int
    dumped: int
    kept: bool


@dataclasses.dataclass(frozen=True)
class DumpInfo(_Record):
    """What a dump file holds (struct cistern_dump_info): the source segment's
    name, config and statistics when the dump started, and its samples."""

    name: str
    config: Config
    stats: Stats
    samples: int
    payload_bytes: int
    skipped: int
    next_id: int
    created_ns: int
    dumped_ns: int
    file_size: int
    format_version: int
    closed: bool
    cold_samples: int  # of samples, those of the cold tier (0 without one)

    @classmethod
    def _from(cls, d: Mapping[str, Any]) -> DumpInfo:
        rest = {k: v for k, v in d.items()
                if k in cls._names() and k not in ("config", "stats")}
        return cls(config=Config._from(d["config"]), stats=Stats._from(d["stats"]), **rest)


@dataclasses.dataclass(frozen=True)
class Inspection(_Record):
    """Everything inspect() reads of a segment, through a read-only mapping."""

    name: str
    config: Config
    stats: Stats
    occupancy: Occupancy
    procs: tuple[ProcInfo, ...]


@dataclasses.dataclass(frozen=True, repr=True)
class RemoteInfo(_Record):
    """What a remote producer's connection knows of its server, and its counts
    (cistern_remote_info_get()). `acked` samples are in their segment, exactly
    once; `failed` ones were refused by the server (a closed segment, a rank
    out of range); the rest of `sent` are still in flight."""

    slot_size: int
    producer_id: int
    ranks: int
    window: int
    sent: int
    acked: int
    failed: int
