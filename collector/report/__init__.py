"""Stage three, showing a judged round: one PR's page model (`page_model.py`: its header facts
and sections, behind `show`, `comment` and the site's PR page alike) and its renderings as a
terminal table, a Markdown comment or JSON (`render.py`). It reads `collector.store.readout`."""
