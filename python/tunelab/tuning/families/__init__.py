"""Built-in tunable kernel families, one module per family (``attention``, ...).

``tunelab.tuning.family.get_family(name)`` imports ``tunelab.tuning.families.<name>`` and takes its
``get_family()`` function, its ``FAMILY`` object, or its single ``TunableFamily`` subclass.
"""
