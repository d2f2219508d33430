"""The chaos run (``manage.py chaos``, README "Proof: the chaos run").

``plan`` (the seeded tasks and faults), ``world`` (the processes it starts and breaks),
``kill`` (the fault a worker is armed with: it kills itself at a tool call), ``naive`` (the
harness it is compared with), ``audit`` (the journal against the providers' ledgers) and
``run`` (the service the command calls).
"""
