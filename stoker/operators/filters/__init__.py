"""Filter operators: Gaussian blur, Laplacian, noise, JPEG distortion, CLAHE.
Each module registers its operators on import."""
