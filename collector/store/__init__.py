"""The one owner of the stored round: the DuckDB file, its schema (`schema.sql`) and migrations
(`db.py`), the one writer of a round as it is collected and judged (`writer.py`), and its
readers: the verdict's evidence (`evidence.py`), the read model every report and page uses
(`readout.py`, `readout_model.py`), the stored policy read back (`stored_policy.py`), the one
export (`export.py`), a round's cost (`cost.py`) and rounds of several files combined into one
(`combine.py`)."""

from collector.store.db import SCHEMA_VERSION, Store, StoreError, open_store

__all__ = ["SCHEMA_VERSION", "Store", "StoreError", "open_store"]
