package admit

// RequestSum is requestSum, for tests that claim a key as a submission would.
var RequestSum = requestSum
