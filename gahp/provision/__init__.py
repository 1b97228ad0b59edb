"""``podgahp provision``: pilots on demand, through the CE.

Each cycle reads the idle jobs of a user pool (:mod:`gahp.provision.demand`), groups them by the
shape a pilot must have to run them (:mod:`gahp.provision.shape`), reads this provisioner's pilots
at the CE (:mod:`gahp.provision.pilots`) and their slots in the user pool
(:mod:`gahp.provision.pool`), and decides what to submit and what to remove
(:mod:`gahp.provision.plan`, pure, with what it remembers of earlier cycles in
:mod:`gahp.provision.history`); :mod:`gahp.provision.service` runs the cycles and logs each
decision. Knobs: :mod:`gahp.provision.settings`.
"""
