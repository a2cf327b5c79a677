"""What batch rows become: summaries, tables an OR paper prints, figures and the front's plot."""
