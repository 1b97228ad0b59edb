"""``podgahp provision``: pilots on demand, through the CE.

Each cycle reads the idle jobs of a user pool (:mod:`gahp.provision.demand`), groups them by the
shape a pilot must have to run them (:mod:`gahp.provision.shape`), compares each group's demand
with the pilots this provisioner has at the CE (:mod:`gahp.provision.pilots`), and decides what to
submit and what to remove (:mod:`gahp.provision.plan`, pure); :mod:`gahp.provision.service` runs
the cycles and logs each decision. Knobs: :mod:`gahp.provision.settings`.
"""
