"""Tables in the papers' layouts and figures, from run outputs."""
