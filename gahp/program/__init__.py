"""One GAHP program, ``<backend>_gahp``: the BLAHP wire format (protocol), the read loop and its workers
(server), what each ``BLAH_*`` command means (commands), and the wiring of one process (main)."""
