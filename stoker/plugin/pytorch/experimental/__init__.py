"""[Experimental] PyTorch integrations whose API may still change: :mod:`.proxy` (DataLoader workers
feeding a pipeline in the main process)."""
