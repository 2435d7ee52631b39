"""`twinrun parity`: the same recorded rollouts through TRL's and verl's real update, compared weight by weight.

- :mod:`.weights`  ``||dW_trl - dW_verl|| / ||dW_trl||`` per tensor group and in total (pure numpy)
- :mod:`.run`      one comparison: record (or read) rollouts, replay them through both backends, compare
- :mod:`.knobs`    the knob table: one comparison per knob where the frameworks may differ, against `plan`
- :mod:`.render`   console tables
"""
