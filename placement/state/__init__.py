"""Placement state: the cluster index fed by watches, and reservations (the assume cache)."""
