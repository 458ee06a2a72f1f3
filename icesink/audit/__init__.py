"""Write-audit-publish for streams: the checks a branch snapshot must pass before ``main`` moves to it.

:mod:`icesink.checks` holds the built-in checks; :mod:`icesink.audit.running` runs a list of them on what a
snapshot added; :mod:`icesink.committer.publisher` decides what to audit and when ``main`` moves.
"""
