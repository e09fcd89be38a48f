"""Pure decision functions (loading, planning, transitions, scheduling). No I/O, no clock."""
