# SPDX-License-Identifier: MIT
"""Type stubs of the extension module cistern._cistern (python/ext/).

The dicts it returns are typed here as TypedDicts; the package turns them into
the records of cistern/records.py. python/tests/test_typing.py checks this
file against the module as it runs (mypy's stubtest: names, signatures,
defaults) and the TypedDicts' keys against the dicts and the records.
"""

from typing import Any, Callable, Final, TypedDict, final

# Any object with the buffer protocol (bytes, bytearray, memoryview, a numpy
# array, a Sample, a Slot, ...). Type checkers can name that protocol only
# from Python 3.12 on (PEP 688), so it is left open here; the module checks
# it at run time (TypeError).
Buffer = Any

# ---------------------------------------------------------------- dicts

class ConfigDict(TypedDict):
    policy: str
    slots: int
    slot_size: int
    mode: int
    watermark: int
    pseudo_epochs: int
    sweep_size: int
    time_steps: int
    batch_size: int
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
    alpha: float
    beta: float
    epsilon: float
    schema: str | None

class PrioInfoDict(TypedDict):
    alpha: float
    beta: float
    epsilon: float
    total: float
    least: float
    max_priority: float
    updates: int
    stale_updates: int
    rebuilds: int

class FieldDict(TypedDict):
    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int
    size: int
    itemsize: int

class SchemaDict(TypedDict):
    text: str
    size: int
    fields: list[FieldDict]

class StatsDict(TypedDict):
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
    seen_hist: list[int]
    unpaired: int
    procs_attached: int
    reception_closed: bool
    producers_expected: int
    producers_done: int
    producers_died: int
    cold_slots: int
    cold_population: int
    cold_disk_bytes: int
    cold_spilled: int
    cold_reads: int
    cold_evictions: int
    cold_bytes_written: int
    cold_bytes_read: int
    cold_write_wait_ns: int
    cold_read_wait_ns: int
    cold_stage_bytes: int
    cold_groups_staged: int
    cold_groups_writing: int
    cold_write_waits: int

class OccupancyDict(TypedDict):
    slots: list[int]
    pinned: int
    held: int
    held_bytes: int
    held_seen_hist: list[int]

class ProcDict(TypedDict):
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

class SegmentInfoDict(TypedDict):
    name: str
    status: int
    config: ConfigDict | None
    file_size: int
    created_ns: int
    uid: int
    mode: int
    population: int
    procs_live: int
    procs_dead: int
    closed: bool

class GcReportDict(TypedDict):
    dead_procs: int
    reservations: int
    redelivered: int
    pins: int
    live_procs: int
    removed: int
    unread: int
    dumped: int
    kept: bool

class DumpInfoDict(TypedDict):
    name: str
    config: ConfigDict
    stats: StatsDict
    samples: int
    payload_bytes: int
    skipped: int
    next_id: int
    created_ns: int
    dumped_ns: int
    file_size: int
    format_version: int
    closed: bool
    cold_samples: int

class RemoteInfoDict(TypedDict):
    slot_size: int
    producer_id: int
    ranks: int
    window: int
    sent: int
    acked: int
    failed: int

MetaTuple = tuple[int, int, int]
Progress = Callable[[int, int], object]
StrPath = str | bytes

# ---------------------------------------------------------------- types

@final
class Handle:
    """An attachment to a cistern segment (one thread at a time)."""

    @property
    def detached(self) -> bool: ...
    @property
    def slot_size(self) -> int: ...
    @property
    def live_samples(self) -> int: ...
    @property
    def skipped(self) -> int: ...
    def put(self, data: Buffer, sim_id: int = 0, time_step: int = 0,
            timeout_ms: int | None = -1, end_of_episode: bool = False) -> int: ...
    def put_batch(self, data: Buffer, item_size: int, count: int, metas: Buffer,
                  timeout_ms: int | None = -1) -> int: ...
    def reserve(self, timeout_ms: int | None = -1) -> Slot: ...
    def put_prioritized(self, data: Buffer, priority: float, sim_id: int = 0,
                        time_step: int = 0, timeout_ms: int | None = -1,
                        end_of_episode: bool = False) -> int: ...
    def get_prioritized(self, out: Buffer, item_size: int, n: int, timeout_ms: int | None = -1,
                        metas: Buffer | None = None, ids: Buffer | None = None,
                        weights: Buffer | None = None) -> int: ...
    def update_priorities(self, ids: Buffer, priorities: Buffer) -> int: ...
    def set_beta(self, beta: float, /) -> None: ...
    def prio_info(self) -> PrioInfoDict: ...
    def get(self, timeout_ms: int | None = -1) -> tuple[bytes, MetaTuple]: ...
    def get_many(self, out: Buffer, item_size: int, count: int, timeout_ms: int | None = -1,
                 metas: Buffer | None = None, skip: bool = False) -> int: ...
    def acquire(self, timeout_ms: int | None = -1) -> Sample: ...
    def acquire_pair(self, timeout_ms: int | None = -1) -> Sample: ...
    def acquire_batch(self, n: int = 0, timeout_ms: int | None = -1) -> Sample: ...
    def acquire_many(self, n: int, timeout_ms: int | None = -1,
                     skip_size: int = -1) -> Sample: ...
    def put_many(self, data: Buffer, stride: int, n: int, sim_id: int = 0, time_step: int = 0,
                 timeout_ms: int | None = -1, ids: Buffer | None = None, /) -> int: ...
    def get_into(self, out: Buffer, timeout_ms: int | None = -1, metas: Buffer | None = None,
                 /) -> int: ...
    def get_batch_into(self, out: Buffer, stride: int, n: int, timeout_ms: int | None = -1,
                       metas: Buffer | None = None, lens: Buffer | None = None, /) -> int: ...
    def waiting_for_room(self) -> int: ...
    def get_batch(self, out: Buffer, item_size: int, n: int, timeout_ms: int | None = -1,
                  metas: Buffer | None = None, skip: bool = False) -> int: ...
    def get_windows(self, out: Buffer, item_size: int, n: int, length: int, step: int,
                    timeout_ms: int | None = -1, metas: Buffer | None = None,
                    ids: Buffer | None = None, weights: Buffer | None = None) -> int: ...
    def close_reception(self) -> None: ...
    def producer_done(self) -> int: ...
    def stats(self) -> StatsDict: ...
    def config(self) -> ConfigDict: ...
    def schema(self) -> SchemaDict | None: ...
    def occupancy(self) -> OccupancyDict: ...
    def procs(self) -> list[ProcDict]: ...
    def detach(self) -> None: ...

@final
class Sample:
    """An acquired sample, pair or batch; a read-only buffer over one payload."""

    @property
    def meta(self) -> MetaTuple | list[MetaTuple]: ...
    @property
    def held(self) -> bool: ...
    @property
    def kind(self) -> str: ...
    @property
    def address(self) -> int: ...
    @property
    def exports(self) -> int: ...
    def __len__(self) -> int: ...
    def release(self) -> None: ...
    def unacquire(self) -> None: ...
    def member(self, i: int, /) -> Sample: ...
    def copy_into(self, out: Buffer, item_size: int, metas: Buffer | None = None) -> int: ...

@final
class Slot:
    """A reserved slot: a writable buffer of `capacity` bytes until commit() or abort()."""

    @property
    def live(self) -> bool: ...
    @property
    def capacity(self) -> int: ...
    def __len__(self) -> int: ...
    def commit(self, length: int, sim_id: int = 0, time_step: int = 0,
               end_of_episode: bool = False) -> int: ...
    def abort(self) -> None: ...

@final
class Remote:
    """A remote producer's connection to a server (one thread at a time)."""

    @property
    def closed(self) -> bool: ...
    def put(self, data: Buffer, sim_id: int = 0, time_step: int = 0,
            timeout_ms: int | None = -1, end_of_episode: bool = False) -> None: ...
    def put_prioritized(self, data: Buffer, priority: float, sim_id: int = 0,
                        time_step: int = 0, timeout_ms: int | None = -1,
                        end_of_episode: bool = False) -> None: ...
    def put_batch(self, data: Buffer, item_size: int, count: int, metas: Buffer,
                  timeout_ms: int | None = -1) -> int: ...
    def flush(self, timeout_ms: int | None = -1) -> None: ...
    def producer_done(self, timeout_ms: int | None = -1) -> None: ...
    def info(self) -> RemoteInfoDict: ...
    def schema(self) -> str | None: ...
    def close(self) -> None: ...

class EndOfData(Exception):
    """Reception is closed and the policy has nothing left to hand out."""

# ------------------------------------------------------------- functions

def create(name: str, policy: int = 0, slot_size: int = 0, slot_count: int = 0, mode: int = 0,
           watermark: int = 0, pseudo_epochs: int = 0, sweep_size: int = 0,
           nb_time_steps: int = 0, batch_size: int = 0, seed: int = 0, max_procs: int = 0,
           expected_producers: int = 0, flags: int = 0, reads_per_put: float = 0.0,
           rate_slack: float = 0.0, schema: str | None = None, alpha: float = 0.0,
           beta: float = 0.0, epsilon: float = 0.0, cold_slots: int = 0,
           cold_dir: str | None = None, max_times_sampled: int = 0) -> Handle: ...
def config_problem(policy: int = 0, slot_size: int = 0, slot_count: int = 0, mode: int = 0,
                   watermark: int = 0, pseudo_epochs: int = 0, sweep_size: int = 0,
                   nb_time_steps: int = 0, batch_size: int = 0, seed: int = 0,
                   max_procs: int = 0, expected_producers: int = 0, flags: int = 0,
                   reads_per_put: float = 0.0, rate_slack: float = 0.0,
                   schema: str | None = None, alpha: float = 0.0, beta: float = 0.0,
                   epsilon: float = 0.0, cold_slots: int = 0,
                   cold_dir: str | None = None, max_times_sampled: int = 0) -> str | None: ...
def remote_connect(endpoint: str, server_key: str | None = None, public_key: str | None = None,
                   secret_key: str | None = None, connect_timeout_ms: int = 0,
                   heartbeat_ivl_ms: int = 0, heartbeat_timeout_ms: int = 0,
                   window: int = 0, linger_us: int = 0) -> Remote: ...
def remote_keygen() -> tuple[str, str]: ...
def schema_parse(text: str, /) -> SchemaDict: ...
def dtype_name(number: int, /) -> str: ...
def attach(name: str, any_owner: bool = False, populate: bool = False,
           producer: bool = False) -> Handle: ...
def open_readonly(name: str, /) -> Handle: ...
def unlink(name: str, /) -> None: ...
def remove(name: str, force: bool = False, any_owner: bool = False) -> None: ...
def gc(name: str, dry_run: bool = False, any_owner: bool = False,
       dump_to: str | None = None, discard: bool = False) -> GcReportDict: ...
def list_segments() -> list[SegmentInfoDict]: ...
def dump(name: str, path: StrPath, progress: Progress | None = None) -> DumpInfoDict: ...
def restore(path: StrPath, name: str | None = None,
            progress: Progress | None = None) -> DumpInfoDict: ...
def dump_verify(path: StrPath, /) -> DumpInfoDict: ...
def strerror(code: int, /) -> str: ...
def policy_parse(name: str, /) -> int: ...
def policy_name(number: int, /) -> str: ...
def slot_class_name(number: int, /) -> str: ...
def name_valid(name: str, /) -> int: ...

# ------------------------------------------------------------- constants

EOD: Final[int]
NAME_MAX: Final[int]
POLICY_COUNT: Final[int]
LOSSY: Final[int]
SINGLE_PRODUCER: Final[int]
SINGLE_READER: Final[int]
DEAD_PRODUCER_DONE: Final[int]
SEEN_BUCKETS: Final[int]
SLOT_CLASSES: Final[int]
PROC_PRODUCER: Final[int]
PROC_READER: Final[int]
DUMP_VERSION: Final[int]
SCHEMA_MAX: Final[int]
FIELD_DIMS: Final[int]
DTYPE_COUNT: Final[int]
DEFAULT_SLOT_SIZE: Final[int]
DEFAULT_SLOT_COUNT: Final[int]
META_END_OF_EPISODE: Final[int]
SLOT_SIZE_MAX: Final[int]
SLOT_COUNT_MAX: Final[int]
WAIT_SLICE_MS: Final[int]
REMOTE_WINDOW: Final[int]
REMOTE_PROTOCOL: Final[int]
VERSION: Final[tuple[int, int, int]]
__version__: Final[str]
