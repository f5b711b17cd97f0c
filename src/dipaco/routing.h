// DiPaCo routing math (docs/dipaco.md "Routing"): the functions that turn one feature vector
// per sequence into a path, computed once before training.
//
//   - generative routing: seeded k-means on the features, and product k-means for many paths
//     (the feature vector cut into contiguous parts, each part clustered on its own, the path
//     = the parts' cluster ids in mixed radix);
//   - discriminative routing: label each sequence of a held-out router split with the path
//     that scores it best (lowest loss), fit a linear classifier from features to that label,
//     and shift the classifier's biases so that the paths' shares of the data are the targeted
//     ones (no empty paths);
//   - shard sizes of an assignment (DiLoCo per module weighs paths by them).
//
// Everything is plain double arithmetic in a fixed order, written out by hand (no BLAS, no
// threads, no <random> distributions): the same features and seed give the same routing,
// bitwise, in every process of a real run and in the simulator. Sizes here are small (one
// feature vector per sequence, a few hundred dimensions, a few paths to a few hundred).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace atl::dipaco {

// Row-major [rows, cols] doubles.
struct Matrix {
  int64_t rows = 0, cols = 0;
  std::vector<double> v;

  Matrix() = default;
  Matrix(int64_t r, int64_t c) : rows(r), cols(c), v(static_cast<size_t>(r * c), 0.0) {}
  double* row(int64_t i) { return v.data() + i * cols; }
  const double* row(int64_t i) const { return v.data() + i * cols; }
};

struct KMeansOptions {
  int max_iterations = 100;  // Lloyd iterations after k-means++ seeding (stops earlier when
                             // no assignment changes)
  int restarts = 4;          // seedings tried; the one with the lowest inertia is kept
};

struct KMeans {
  Matrix centroids;             // [k, d]
  std::vector<int> assignment;  // cluster of each row of the features it was fitted on
  double inertia = 0;           // sum of squared distances to the assigned centroids
  int iterations = 0;           // Lloyd iterations of the kept restart
};

// k-means with k-means++ seeding. Requires 1 <= k <= rows. A cluster that empties takes the
// row farthest from its centroid among the clusters that can spare one (so no cluster stays
// empty). Ties go to the lower cluster id.
KMeans kmeans(const Matrix& x, int k, uint64_t seed, const KMeansOptions& options = {});
// The nearest centroid of every row (ties: the lower id).
std::vector<int> nearest(const Matrix& x, const Matrix& centroids);

// Product k-means: columns cut into ks.size() contiguous parts of (nearly) equal width, part j
// clustered into ks[j] clusters (seed derived per part); path = sum_j id_j * prod_{j'>j} ks[j'].
struct ProductKMeans {
  std::vector<int> ks;
  std::vector<int64_t> bounds;  // part j = columns [bounds[j], bounds[j+1])
  std::vector<KMeans> parts;
  std::vector<int> assignment;  // path of each row it was fitted on
};
ProductKMeans product_kmeans(const Matrix& x, const std::vector<int>& ks, uint64_t seed,
                             const KMeansOptions& options = {});
std::vector<int> route(const ProductKMeans& pk, const Matrix& x);

// Discriminative labels: the path with the lowest loss on each row of `losses` [n, paths]
// (ties: the lower path id).
std::vector<int> best_paths(const Matrix& losses);

struct LinearRouterOptions {
  int epochs = 300;          // full-batch gradient steps of the logistic regression
  double lr = 0.5;           // on standardised features
  double l2 = 1e-4;          // weight decay on the weights (not the biases)
  int balance_iterations = 200;  // bias corrections towards the target shares
};

// A linear classifier: path = argmax_p (w_p . standardise(z) + b_p) (ties: lower path).
struct LinearRouter {
  std::vector<double> mean, inv_std;  // feature standardisation, from the fitting data
  Matrix weight;                      // [paths, d]
  std::vector<double> bias;           // [paths]
  std::vector<int> route(const Matrix& x) const;
  Matrix logits(const Matrix& x) const;  // [n, paths]
};

// Multinomial logistic regression from features to `labels` (in [0, paths)), then
// balance() towards `target_shares` (one per path, summing to 1; empty: the labels' shares
// are not corrected).
LinearRouter fit_linear_router(const Matrix& x, const std::vector<int>& labels, int paths,
                               const std::vector<double>& target_shares, const LinearRouterOptions& options = {});
// Shifts the biases so that the routed shares of `x` approach `target_shares`: each iteration
// tries the kept biases plus step * log(target / max(share, 1/(2n))); it keeps the trial (and
// grows the step by 1.5, up to 1) unless the largest share error grows, else halves the step.
// Stops at an error of 1/n. Returns the largest |share - target| reached.
double balance(LinearRouter& router, const Matrix& x, const std::vector<double>& target_shares, int iterations);

// Rows per path (paths = the number of paths; ids outside [0, paths) are not counted).
std::vector<int64_t> shard_sizes(const std::vector<int>& assignment, int paths);

}  // namespace atl::dipaco
