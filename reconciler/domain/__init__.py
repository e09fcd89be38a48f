"""Pure data of the control plane: desired and observed state, plans, statuses. No I/O."""
