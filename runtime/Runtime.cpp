// Runtime entry points (in progress).
