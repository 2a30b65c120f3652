"""Examples that ship with yamltrace: `tiny` (a small decoder built in-process) and `demo` (`make demo`)."""
