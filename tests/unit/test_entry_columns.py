"""The journal columns a multi-row append names are those ``_entry_params`` fills, in order."""

from __future__ import annotations

from stalwart._store import Entry
from stalwart._store.sql._base import ENTRY_COLUMNS, SQLBase


def test_an_entrys_parameters_are_its_columns_in_order_then_the_owner() -> None:
    base = SQLBase.__new__(SQLBase)
    base.keyring = None
    params = base._entry_params(None, "r", Entry(kind="step", name="s", status="completed"), "w")
    assert list(params) == [*ENTRY_COLUMNS, "owner"]
