"""The host family: what the engine's host adds to the GPU's kernels, S(N) = a + b (N - 1).

floor    E1.4: S(N) and its parts fitted on Vidur's measured host overheads, held out per GPU
         (tidy -> calibrate/fit_full -> predict -> run (scores) -> document (claims) -> plot)
learner  E1.19: the host floor on real engine steps (measured step - the GPU-work part of the engine
         profile's own prediction), an online
         learner frozen at deploy against the shipped profile (predict_host_floor -> host_learner /
         shift_case (fit) -> score_runs -> claims -> plot; `build` chains them)
"""
