// The cooperative matrices of 16 x 16 (CS = 16): A (activations), B (weights), C (f32 sums).
alias CoopA = coop_mat16x16<CoopIn, A>;
alias CoopB = coop_mat16x16<CoopIn, B>;
alias CoopC = coop_mat16x16<f32, C>;
