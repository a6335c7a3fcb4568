"""Training scripts for the small models verilive ships (run from the repository root, e.g.
``python -m train.gender``). They read ../shared/data and are not part of the wheel."""
