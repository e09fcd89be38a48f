"""The Pulumi engine (Automation API): imported only when a cloud resource needs it."""
