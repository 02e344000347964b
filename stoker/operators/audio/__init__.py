"""Audio operators: decoding (WAV, FLAC, Ogg/Vorbis through libsndfile), resampling, and the
speech front end (preemphasis, spectrogram, mel filter bank, MFCC, decibels, silence trimming).
Each module registers its operators on import."""
