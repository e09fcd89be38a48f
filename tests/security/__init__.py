"""Security tests: each trust-boundary finding reproduced in its attack form and refused."""
