"""Infrastructure engines behind one protocol: the local engine and the Pulumi engine."""
