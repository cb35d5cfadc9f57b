"""`kgrag doctor`: what this machine can run and what to install for the rest."""
