// The cooperative matrices of 8 x 8 (CS = 8): A (activations), B (weights), C (f32 sums).
alias CoopA = coop_mat8x8<CoopIn, A>;
alias CoopB = coop_mat8x8<CoopIn, B>;
alias CoopC = coop_mat8x8<f32, C>;
