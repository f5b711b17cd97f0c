#include "src/dipaco/routing.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "src/base/hash.h"
#include "src/data/rng.h"

namespace atl::dipaco {

namespace {

double sq_dist(const double* a, const double* b, int64_t d) {
  double s = 0;
  for (int64_t j = 0; j < d; ++j) {
    const double t = a[j] - b[j];
    s += t * t;
  }
  return s;
}

// Nearest centroid of row `r` and its squared distance (ties: the lower id).
std::pair<int, double> nearest_of(const double* r, const Matrix& c) {
  int best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (int64_t k = 0; k < c.rows; ++k) {
    const double d = sq_dist(r, c.row(k), c.cols);
    if (d < best_d) {
      best_d = d;
      best = static_cast<int>(k);
    }
  }
  return {best, best_d};
}

// k-means++ seeding: the first centroid uniformly, each next one with probability
// proportional to the squared distance to the nearest centroid chosen so far.
Matrix seed_centroids(const Matrix& x, int k, data::Rng& rng) {
  Matrix c(k, x.cols);
  std::vector<double> dist(static_cast<size_t>(x.rows), std::numeric_limits<double>::infinity());
  int64_t pick = static_cast<int64_t>(rng.uniform_int(static_cast<uint64_t>(x.rows)));
  for (int j = 0; j < k; ++j) {
    std::copy(x.row(pick), x.row(pick) + x.cols, c.row(j));
    double total = 0;
    for (int64_t i = 0; i < x.rows; ++i) {
      dist[i] = std::min(dist[i], sq_dist(x.row(i), c.row(j), x.cols));
      total += dist[i];
    }
    if (j + 1 == k) break;
    if (total <= 0) {  // every row sits on a centroid already: any row will do
      pick = static_cast<int64_t>(rng.uniform_int(static_cast<uint64_t>(x.rows)));
      continue;
    }
    double u = rng.uniform() * total;
    pick = x.rows - 1;
    for (int64_t i = 0; i < x.rows; ++i) {
      if (u < dist[i]) {
        pick = i;
        break;
      }
      u -= dist[i];
    }
  }
  return c;
}

KMeans lloyd(const Matrix& x, Matrix centroids, int max_iterations) {
  const int k = static_cast<int>(centroids.rows);
  KMeans out;
  out.assignment.assign(static_cast<size_t>(x.rows), -1);
  std::vector<double> dist(static_cast<size_t>(x.rows), 0.0);
  std::vector<int64_t> count(static_cast<size_t>(k));
  for (int it = 0;; ++it) {
    bool changed = false;
    std::fill(count.begin(), count.end(), 0);
    for (int64_t i = 0; i < x.rows; ++i) {
      const auto [id, d] = nearest_of(x.row(i), centroids);
      changed |= out.assignment[i] != id;
      out.assignment[i] = id;
      dist[i] = d;
      ++count[id];
    }
    // An empty cluster takes the row farthest from its centroid among the clusters that keep
    // one (ties: the lower row), so that no cluster stays empty.
    for (int c = 0; c < k; ++c) {
      if (count[c] > 0) continue;
      int64_t far = -1;
      for (int64_t i = 0; i < x.rows; ++i) {
        if (count[out.assignment[i]] > 1 && (far < 0 || dist[i] > dist[far])) far = i;
      }
      --count[out.assignment[far]];
      out.assignment[far] = c;
      dist[far] = 0;
      count[c] = 1;
    }
    out.iterations = it;
    if (!changed || it == max_iterations) break;
    std::fill(centroids.v.begin(), centroids.v.end(), 0.0);
    for (int64_t i = 0; i < x.rows; ++i)
      for (int64_t j = 0; j < x.cols; ++j) centroids.row(out.assignment[i])[j] += x.row(i)[j];
    for (int c = 0; c < k; ++c)
      for (int64_t j = 0; j < x.cols; ++j) centroids.row(c)[j] /= static_cast<double>(count[c]);
  }
  out.inertia = 0;
  for (double d : dist) out.inertia += d;
  out.centroids = std::move(centroids);
  return out;
}

}  // namespace

KMeans kmeans(const Matrix& x, int k, uint64_t seed, const KMeansOptions& options) {
  if (k < 1 || k > x.rows) {
    throw std::invalid_argument("kmeans: k = " + std::to_string(k) + " clusters for " + std::to_string(x.rows) + " rows");
  }
  KMeans best;
  best.inertia = std::numeric_limits<double>::infinity();
  for (int r = 0; r < std::max(1, options.restarts); ++r) {
    data::Rng rng(splitmix64(seed + static_cast<uint64_t>(r)));
    KMeans run = lloyd(x, seed_centroids(x, k, rng), options.max_iterations);
    if (run.inertia < best.inertia) best = std::move(run);
  }
  return best;
}

std::vector<int> nearest(const Matrix& x, const Matrix& centroids) {
  std::vector<int> out(static_cast<size_t>(x.rows));
  for (int64_t i = 0; i < x.rows; ++i) out[i] = nearest_of(x.row(i), centroids).first;
  return out;
}

namespace {

Matrix columns(const Matrix& x, int64_t from, int64_t to) {
  Matrix out(x.rows, to - from);
  for (int64_t i = 0; i < x.rows; ++i) std::copy(x.row(i) + from, x.row(i) + to, out.row(i));
  return out;
}

}  // namespace

ProductKMeans product_kmeans(const Matrix& x, const std::vector<int>& ks, uint64_t seed,
                             const KMeansOptions& options) {
  const int64_t m = static_cast<int64_t>(ks.size());
  if (m < 1 || m > x.cols) {
    throw std::invalid_argument("product_kmeans: " + std::to_string(m) + " parts for " + std::to_string(x.cols) +
                                " feature columns");
  }
  ProductKMeans pk;
  pk.ks = ks;
  for (int64_t j = 0; j <= m; ++j) pk.bounds.push_back(j * x.cols / m);
  for (int64_t j = 0; j < m; ++j) {
    pk.parts.push_back(kmeans(columns(x, pk.bounds[j], pk.bounds[j + 1]), ks[j],
                              splitmix64(seed ^ (0x70617274ULL + static_cast<uint64_t>(j))), options));
  }
  pk.assignment = route(pk, x);
  return pk;
}

std::vector<int> route(const ProductKMeans& pk, const Matrix& x) {
  std::vector<int> path(static_cast<size_t>(x.rows), 0);
  for (size_t j = 0; j < pk.parts.size(); ++j) {
    const std::vector<int> ids = nearest(columns(x, pk.bounds[j], pk.bounds[j + 1]), pk.parts[j].centroids);
    for (int64_t i = 0; i < x.rows; ++i) path[i] = path[i] * pk.ks[j] + ids[i];
  }
  return path;
}

std::vector<int> best_paths(const Matrix& losses) {
  std::vector<int> out(static_cast<size_t>(losses.rows));
  for (int64_t i = 0; i < losses.rows; ++i) {
    const double* r = losses.row(i);
    out[i] = static_cast<int>(std::min_element(r, r + losses.cols) - r);
  }
  return out;
}

Matrix LinearRouter::logits(const Matrix& x) const {
  Matrix out(x.rows, weight.rows);
  std::vector<double> z(static_cast<size_t>(x.cols));
  for (int64_t i = 0; i < x.rows; ++i) {
    for (int64_t j = 0; j < x.cols; ++j) z[j] = (x.row(i)[j] - mean[j]) * inv_std[j];
    for (int64_t p = 0; p < weight.rows; ++p) {
      double s = bias[p];
      for (int64_t j = 0; j < x.cols; ++j) s += weight.row(p)[j] * z[j];
      out.row(i)[p] = s;
    }
  }
  return out;
}

std::vector<int> LinearRouter::route(const Matrix& x) const {
  const Matrix l = logits(x);
  std::vector<int> out(static_cast<size_t>(x.rows));
  for (int64_t i = 0; i < x.rows; ++i) {
    const double* r = l.row(i);
    out[i] = static_cast<int>(std::max_element(r, r + l.cols) - r);
  }
  return out;
}

LinearRouter fit_linear_router(const Matrix& x, const std::vector<int>& labels, int paths,
                               const std::vector<double>& target_shares, const LinearRouterOptions& options) {
  if (paths < 1 || static_cast<int64_t>(labels.size()) != x.rows || x.rows == 0) {
    throw std::invalid_argument("fit_linear_router: " + std::to_string(labels.size()) + " labels for " +
                                std::to_string(x.rows) + " rows and " + std::to_string(paths) + " paths");
  }
  const int64_t n = x.rows, d = x.cols;
  LinearRouter r;
  r.mean.assign(static_cast<size_t>(d), 0.0);
  r.inv_std.assign(static_cast<size_t>(d), 1.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) r.mean[j] += x.row(i)[j];
  for (double& m : r.mean) m /= static_cast<double>(n);
  std::vector<double> var(static_cast<size_t>(d), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) var[j] += (x.row(i)[j] - r.mean[j]) * (x.row(i)[j] - r.mean[j]);
  for (int64_t j = 0; j < d; ++j) {
    const double sd = std::sqrt(var[j] / static_cast<double>(n));
    r.inv_std[j] = sd > 1e-12 ? 1.0 / sd : 1.0;
  }
  r.weight = Matrix(paths, d);
  r.bias.assign(static_cast<size_t>(paths), 0.0);

  Matrix grad_w(paths, d);
  std::vector<double> grad_b(static_cast<size_t>(paths)), prob(static_cast<size_t>(paths));
  for (int epoch = 0; epoch < options.epochs; ++epoch) {
    std::fill(grad_w.v.begin(), grad_w.v.end(), 0.0);
    std::fill(grad_b.begin(), grad_b.end(), 0.0);
    const Matrix l = r.logits(x);
    for (int64_t i = 0; i < n; ++i) {
      const double* li = l.row(i);
      const double top = *std::max_element(li, li + paths);
      double z = 0;
      for (int p = 0; p < paths; ++p) z += (prob[p] = std::exp(li[p] - top));
      for (int p = 0; p < paths; ++p) {
        const double g = prob[p] / z - (labels[i] == p ? 1.0 : 0.0);
        grad_b[p] += g;
        for (int64_t j = 0; j < d; ++j) grad_w.row(p)[j] += g * (x.row(i)[j] - r.mean[j]) * r.inv_std[j];
      }
    }
    const double scale = options.lr / static_cast<double>(n);
    for (int p = 0; p < paths; ++p) {
      r.bias[p] -= scale * grad_b[p];
      for (int64_t j = 0; j < d; ++j) {
        r.weight.row(p)[j] -= scale * grad_w.row(p)[j] + options.lr * options.l2 * r.weight.row(p)[j];
      }
    }
  }
  if (!target_shares.empty()) balance(r, x, target_shares, options.balance_iterations);
  return r;
}

double balance(LinearRouter& router, const Matrix& x, const std::vector<double>& target_shares, int iterations) {
  const int paths = static_cast<int>(router.bias.size());
  if (static_cast<int>(target_shares.size()) != paths) {
    throw std::invalid_argument("balance: " + std::to_string(target_shares.size()) + " target shares for " +
                                std::to_string(paths) + " paths");
  }
  const double n = static_cast<double>(std::max<int64_t>(x.rows, 1));
  auto error_of = [&](std::vector<double>& shares) {
    const std::vector<int64_t> sizes = shard_sizes(router.route(x), paths);
    double worst = 0;
    for (int p = 0; p < paths; ++p) {
      shares[p] = static_cast<double>(sizes[p]) / n;
      worst = std::max(worst, std::abs(shares[p] - target_shares[p]));
    }
    return worst;
  };
  std::vector<double> shares(static_cast<size_t>(paths)), trial_shares(static_cast<size_t>(paths));
  std::vector<double> best_bias = router.bias;
  double best = error_of(shares), step = 1.0;
  for (int it = 0; it < iterations && best > 1.0 / n; ++it) {
    for (int p = 0; p < paths; ++p) {
      router.bias[p] = best_bias[p] + step * std::log(std::max(target_shares[p], 0.5 / n) / std::max(shares[p], 0.5 / n));
    }
    const double err = error_of(trial_shares);
    if (err <= best) {  // equal: no row crossed a boundary yet; go on in the same direction
      best = err;
      best_bias = router.bias;
      shares = trial_shares;
      step = std::min(1.0, step * 1.5);
    } else {
      step *= 0.5;
    }
  }
  router.bias = best_bias;
  return best;
}

std::vector<int64_t> shard_sizes(const std::vector<int>& assignment, int paths) {
  std::vector<int64_t> out(static_cast<size_t>(std::max(paths, 0)), 0);
  for (int a : assignment) {
    if (a >= 0 && a < paths) ++out[a];
  }
  return out;
}

}  // namespace atl::dipaco
