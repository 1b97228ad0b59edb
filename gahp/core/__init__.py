"""The values and plumbing every layer shares: the job model and its states, the error tree, the knobs, the
one retry rule, logging, each user's state directory, bounded reads of user files, writing outputs, the
schedd's audit log and the schedd itself, and the registry of backends and commands."""
