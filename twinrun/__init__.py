"""twinrun: reproduce RL-trained skill curators under TRL and verl from one spec, and compare the curves."""

__version__ = "0.1.0"
