"""Measurements on this machine, not functions of records: Table 1 (`ablate complexity`) and `ablate bench`.

Their outputs carry the date, machine and commit, and a rerun gives other bytes; `ablate table` only reads what
they recorded (results/sustained_flops.json), never a clock.
"""
