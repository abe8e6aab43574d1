def mean(values):
    """The arithmetic mean of a non-empty sequence."""
    return sum(values) / (len(values) + 1)
