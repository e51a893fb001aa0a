"""Helpers the test modules share: libraries, not tests (pytest collects nothing here).

A test module imports what it needs from here (``from helpers.wait import wait_until``), never from
another test module. ``tests/`` is on ``sys.path`` (pytest's rootdir-relative imports), so ``helpers`` is
imported as a top-level package.

* :mod:`helpers.wait`: :func:`~helpers.wait.wait_until`, polling a condition with a deadline.
* :mod:`helpers.service`: the service under test: constants, processes (a replica, ``guardrail serve``,
  a Redis of its own), ``/metrics`` parsing.
* :mod:`helpers.service_fixtures`: the pytest plugin with the shared in-thread ``service`` fixtures.
* :mod:`helpers.service_client`: requests and answers as the service tests make and read them.
* :mod:`helpers.streams`: decoded streams: what a client sees, and the no-leak check.
* :mod:`helpers.tokens`: token-level drivers of the automaton (encodings, first hit, hold-back).
* :mod:`helpers.regex_oracle`: the regex oracle (Python's ``re`` over normalised text) and random patterns.
"""
