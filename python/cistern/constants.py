# SPDX-License-Identifier: MIT
"""The library's constants and names: its policies, slot classes, dtypes and
versions, and the checks of policy and segment names."""

from __future__ import annotations


from ._common import _cistern

__all__ = [
    "POLICIES", "SLOT_CLASSES", "VERSION", "DEFAULT_SLOT_COUNT", "DEFAULT_SLOT_SIZE",
    "__version__", "DTYPES", "name_valid", "policy_name", "policy_number",
    "META_END_OF_EPISODE",
]


_BATCH_POLICIES = ("reservoir", "fifo-evict-reservoir", "batch-reservoir", "prioritized")


# The names POLICIES.md uses, lowercased, accepted as well.
_CAMEL = {"fifoevictreservoir": "fifo-evict-reservoir",
          "simpairedreservoir": "sim-paired-reservoir",
          "batchreservoir": "batch-reservoir"}


#: The policies' names, indexed by policy number.
POLICIES: tuple[str, ...] = tuple(_cistern.policy_name(i) for i in range(_cistern.POLICY_COUNT))


#: The slot classes that Occupancy.slots counts, indexed by class number.
SLOT_CLASSES: tuple[str, ...] = tuple(_cistern.slot_class_name(i)
                                      for i in range(_cistern.SLOT_CLASSES))


#: The library's version, (major, minor, patch).
VERSION: tuple[int, int, int] = _cistern.VERSION


#: The bit of a window member's flags (get_windows(meta=True), column 3) set
#: on the last step of an episode (put(end_of_episode=True)).
META_END_OF_EPISODE: int = _cistern.META_END_OF_EPISODE


#: create()'s slots and slot_size when left out (slot_size with a schema: its sample size).
DEFAULT_SLOT_COUNT: int = _cistern.DEFAULT_SLOT_COUNT


DEFAULT_SLOT_SIZE: int = _cistern.DEFAULT_SLOT_SIZE


#: The package's version, as the build gave it (meson.build's project version).
__version__: str = _cistern.__version__


#: The dtypes a schema's fields may have, by their names in the text form.
DTYPES: tuple[str, ...] = tuple(_cistern.dtype_name(i) for i in range(_cistern.DTYPE_COUNT))


def name_valid(name: str) -> bool:
    """Whether `name` is a valid segment name: 1 to 64 characters from
    [A-Za-z0-9._-], starting with a letter or digit (cistern_name_valid())."""
    return isinstance(name, str) and _cistern.name_valid(name) == 0


def policy_name(number: int) -> str:
    """The name of policy `number` ("fifo", "firo", ...) (cistern_policy_name());
    ValueError if there is none."""
    return _cistern.policy_name(number)


def policy_number(policy: str | int) -> int:
    """The number of a policy given by name (as in POLICIES; underscores and the
    CamelCase names of POLICIES.md work too) or by number (cistern_policy_parse());
    ValueError if there is none."""
    if isinstance(policy, str):
        key = policy.lower().replace("_", "-")
        key = _CAMEL.get(key, key)
        try:
            return _cistern.policy_parse(key)
        except ValueError:
            pass
    if isinstance(policy, int) and not isinstance(policy, bool):
        if 0 <= policy < _cistern.POLICY_COUNT:
            return policy
    raise ValueError(f"unknown policy {policy!r}; one of {', '.join(POLICIES)}")
