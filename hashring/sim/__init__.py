"""Building blocks of the placement simulator (:mod:`hashring.simulate`) and the CLI.

* :mod:`hashring.sim.fleet`: Kubernetes-style pod names and the membership
  changes of each scenario;
* :mod:`hashring.sim.placers`: every compared strategy behind one small
  interface (owners of all keys for a member list);
* :mod:`hashring.sim.report`: rich tables; :mod:`hashring.sim.plot`: the
  matplotlib figure (needs the ``plot`` extra);
* :mod:`hashring.sim.explain`: who owns which key and why (``hashring explain``).
"""
