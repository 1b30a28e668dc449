"""The terms of the step equation, each a small pure function of numpy arrays.

    t_step = max(T_blocks, N_kern * T_launch) + alpha * S(N) + T_samp
    T_blocks = N_L * (t_proj + t_attn) + t_light_total + t_lm_head (+ t_allreduce)

Times are in seconds inside the terms; the public API reports milliseconds.
"""
