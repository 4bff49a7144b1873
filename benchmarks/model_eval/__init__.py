"""Dataset evaluation of cost models: ranking metrics on held-out networks (:mod:`.metrics`, :mod:`.run`)."""
