"""Trace replays' shared pieces: the pools of a replay, the pieces every replay shares, hindsight bounds."""
